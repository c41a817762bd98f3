/**
 * The rate-limit stage: what the request pipeline calls after authentication and before the body
 * is read. It only maps the request context onto a RateLimitSubject; all decisions are in
 * RateLimitService.
 *
 * The parameter types are the few fields the stage reads, so the pipeline's own Context and Route
 * fit them as they are (and tests need no server).
 */
import type { KeyKind, RouteGroup } from './rules.js';
import type { RateLimitService, RateLimitTenant } from './limiter.js';
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

export function createRateLimitStage(limits: RateLimitService, metrics?: { rateLimited(rule: string): void }): RateLimitStage {
  return {
    async check(ctx, route) {
      const p = ctx.principal;
      const proxy = ctx.proxyPrincipal;
      const tenant = p?.tenant ?? proxy?.tenant;
      // Unauthenticated routes (health) have no tenant, hence no rule.
      if (!tenant) return {};
      try {
        const decision = await limits.check({
          tenant,
          route: route.group,
          clientIp: ctx.clientIp,
          apiKeyId: p?.keyId,
          keyKind: p?.app.type,
          legacy: p?.app.legacy,
          // The outbound proxy has no proxy key: its proxy-endpoint row counts by the API key.
          proxyKeyId: proxy?.keyId ?? (route.group === 'proxy' ? p?.keyId : undefined),
        });
        return decision.headers;
      } catch (err) {
        if (err instanceof RateLimitedError) metrics?.rateLimited(err.rule);
        throw err;
      }
    },
  };
}
