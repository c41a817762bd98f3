/**
 * The rate-limit stage: what the request pipeline calls after authentication and before the body
 * is read. It only maps the request context onto a RateLimitSubject; all decisions are in
 * RateLimitService.
 *
 * The parameter types are the few fields the stage reads, so the pipeline's own Context and Route
 * fit them as they are (and tests need no server).
 */
import { REACTOR_TOKENIZE, type KeyKind, type RouteGroup } from './rules.js';
import type { RateLimitService, RateLimitSubject, RateLimitTenant } from './limiter.js';
import { RateLimitedError } from './decide.js';

export interface GateContext {
  clientIp: string;
  /** Set when the request authenticated with SVC-API-KEY. */
  principal?: { tenant: RateLimitTenant; app: { type: KeyKind; legacy: boolean }; keyId: string };
  /** Set when the request carried a valid SVC-PROXY-KEY. */
  proxyPrincipal?: { tenant: RateLimitTenant; keyId: string };
}

export interface RateLimitStage {
  /** Resolves with the RateLimit-* headers for the response; throws ServiceError 429 / 503. */
  check(ctx: GateContext, route: { group: RouteGroup }): Promise<Record<string, string>>;
}

type Metrics = { rateLimited(rule: string): void };

/**
 * Reactor calls the stage admitted, by request context: what countReactorTokenize needs to count
 * the call's `tokenize` later, on the same counters. Weak: gone with the request.
 */
const reactorCalls = new WeakMap<object, { limits: RateLimitService; metrics: Metrics | undefined; subject: RateLimitSubject }>();

async function counted(limits: RateLimitService, metrics: Metrics | undefined, subject: RateLimitSubject): Promise<Record<string, string>> {
  try {
    return (await limits.check(subject)).headers;
  } catch (err) {
    if (err instanceof RateLimitedError) metrics?.rateLimited(err.rule);
    throw err;
  }
}

export function createRateLimitStage(limits: RateLimitService, metrics?: Metrics): RateLimitStage {
  return {
    async check(ctx, route) {
      const p = ctx.principal;
      const proxy = ctx.proxyPrincipal;
      const tenant = p?.tenant ?? proxy?.tenant;
      // Unauthenticated routes (health) have no tenant, hence no rule.
      if (!tenant) return {};
      const subject: RateLimitSubject = {
        tenant,
        route: route.group,
        clientIp: ctx.clientIp,
        apiKeyId: p?.keyId,
        keyKind: p?.app.type,
        legacy: p?.app.legacy,
        // The outbound proxy has no proxy key: its proxy-endpoint row counts by the API key.
        proxyKeyId: proxy?.keyId ?? (route.group === 'proxy' ? p?.keyId : undefined),
      };
      const headers = await counted(limits, metrics, subject);
      if (route.group === 'reactor') reactorCalls.set(ctx, { limits, metrics, subject: { ...subject, route: REACTOR_TOKENIZE } });
      return headers;
    },
  };
}

/**
 * the tokens a reactor's `tokenize` creates count on the caller's creating rules
 * (`creating_tokens`, and `legacy_tokens_create` for a legacy application) as one POST /tokenize
 * does, on the same counters. Called by the reactor route once the reactor returned `tokenize` and
 * before any token is created: an exhausted rule throws 429 rate_limited (nothing is created); else
 * the response's RateLimit-* headers become the creating rule's when it has fewer points left. A
 * request the stage did not see (no rate-limit stage) counts nothing.
 */
export async function countReactorTokenize(ctx: { headers: Record<string, string> }): Promise<void> {
  const call = reactorCalls.get(ctx);
  if (!call) return;
  reactorCalls.delete(ctx);
  const headers = await counted(call.limits, call.metrics, call.subject);
  const left = headers['RateLimit-Remaining'];
  const before = ctx.headers['RateLimit-Remaining'];
  if (left !== undefined && (before === undefined || Number(left) < Number(before))) Object.assign(ctx.headers, headers);
}
