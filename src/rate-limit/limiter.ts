/**
 * The rate-limit service: built once at start-up from `rate_limits` config, asked once per request
 * (after authentication, before the body is read) with the request's subject.
 *
 *   const limits = RateLimitService.create(config.rate_limits, { log, redis });
 *   const { headers } = await limits.check({ tenant, route: 'tokenize', clientIp, apiKeyId, keyKind });
 *   // set `headers` on the response; a 429 / 503 is thrown as a ServiceError carrying its headers
 *
 * Every rule of `rules.ts` that matches the request counts it (one point each); the strictest
 * decides (README "Rate limits"): any rule over its limit → 429 with the longest wait; otherwise
 * the RateLimit-* headers describe the rule with the fewest points left.
 *
 * Stores: rate-limiter-flexible's RateLimiterMemory (one instance) or RateLimiterRedis (counters
 * shared by every instance on one Redis). rate-limiter-flexible resolves a consume with a
 * RateLimiterRes, rejects with a RateLimiterRes when over the limit, and rejects with an Error when
 * the store failed; that is the one mapping from this dependency to our errors (errors.ts: one mapping per dependency, at its edge).
 *
 * Redis down:
 * - `on_store_error: reject` → 503 rate_limit_unavailable;
 * - `allow` → the request is counted on a per-instance memory limiter with the same limits (the
 *   "insurance" limiter), so traffic under the limit is served while a flood from one key is still
 *   stopped by each instance. We call the insurance limiter ourselves rather than through
 *   rate-limiter-flexible's `insuranceLimiter` option because that option swallows the store error,
 *   and the failure must be logged and counted.
 * No check waits longer than `timeout_ms` on Redis, commands are never queued while the connection
 * is down (`rejectIfRedisNotReady`, plus `enableOfflineQueue: false` on a client we create), and
 * ioredis reconnects on its own, so limits work again when Redis is back without a restart.
 */
import { Redis, type Cluster } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Config, RateRuleOverride } from '../config/schema.js';
import type { Logger } from '../log.js';
import { decide, NO_LIMITS, type Outcome as AnyOutcome, type RateLimitDecision } from './decide.js';
import { StoreHealth } from './store-health.js';
import {
  ruleMatches,
  resolveRules,
  type Counter,
  type EffectiveRule,
  type KeyKind,
  type RouteGroup,
  type RuleLimits,
  type Tier,
} from './rules.js';

export type { RouteGroup, KeyKind, Tier } from './rules.js';
export type { RateLimitDecision } from './decide.js';

export type RateLimitConfig = Config['rate_limits'];

/** The tenant fields the limits depend on (a `TenantConfig` fits). */
export interface RateLimitTenant {
  id: string;
  test: boolean;
  rate_limit_tier: Tier;
  custom_rate_limits: Readonly<Record<string, RateRuleOverride>>;
}

export interface RateLimitSubject {
  tenant: RateLimitTenant;
  route: RouteGroup;
  /** From `createClientIp` (src/http/client-ip.ts). */
  clientIp: string;
  /** A digest of the API key (never the key itself). */
  apiKeyId?: string;
  /** The type of the application the API key belongs to. */
  keyKind?: KeyKind;
  /** The application is marked `legacy: true` (the spec's legacy per-IP rules apply). */
  legacy?: boolean;
  /** A digest of the proxy key (never the key itself). */
  proxyKeyId?: string;
}

export interface RateLimitServiceOptions {
  log: Logger;
  /** A shared ioredis client; without one, `store: redis` connects to `url` itself. */
  redis?: Redis | Cluster;
  /** Store failures are logged at most once per this interval (default 10 s). */
  failureLogIntervalMs?: number;
}

export interface RateLimitStats {
  /** Checks that met a store failure (error or timeout) since start-up. */
  storeFailures: number;
}

/**
 * ioredis options for a client used by the limiter: fail fast instead of queueing while
 * disconnected, never resend stale increments after a reconnect, reconnect forever with a short
 * back-off so recovery needs no restart.
 */
export const RATE_LIMIT_REDIS_OPTIONS = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  autoResendUnfulfilledCommands: false,
  connectTimeout: 2_000,
  retryStrategy: (times: number): number => Math.min(50 * times, 1_000),
} as const;

type Limiter = RateLimiterAbstract;

interface CompiledRule extends EffectiveRule {
  limiter: Limiter;
  /** Per-instance fallback in `allow` mode with a Redis store. */
  insurance: Limiter | undefined;
}

interface TenantEntry {
  tier: Tier;
  custom: RateLimitTenant['custom_rate_limits'];
  test: boolean;
  all: CompiledRule[] | undefined;
  /** Matching rules by `route|keyKind|legacy`. */
  selected: Map<string, CompiledRule[]>;
}

type Outcome = AnyOutcome<CompiledRule>;

const TIMED_OUT: unique symbol = Symbol('timed out');
const TIMEOUT_ERROR = new Error('rate-limit store timed out');

function counterIdentity(counter: Counter, s: RateLimitSubject): string | undefined {
  switch (counter) {
    case 'api_key':
      return s.apiKeyId;
    case 'api_key_ip':
      return s.apiKeyId === undefined ? undefined : `${s.apiKeyId}|${s.clientIp}`;
    case 'proxy_key':
      return s.proxyKeyId;
    case 'ip':
      return s.clientIp;
  }
}

export class RateLimitService {
  private readonly tenants = new Map<string, TenantEntry>();
  private readonly limiters = new Map<string, { limiter: Limiter; insurance: Limiter | undefined }>();
  private readonly redis: Redis | Cluster | undefined;
  private readonly ownsRedis: boolean;
  private readonly firstReady: Promise<void> | undefined;
  private readonly health: StoreHealth;
  private everReady = false;

  private constructor(
    private readonly cfg: RateLimitConfig,
    private readonly log: Logger,
    redis: Redis | Cluster | undefined,
    ownsRedis: boolean,
    failureLogIntervalMs: number,
  ) {
    this.health = new StoreHealth(log, cfg.on_store_error, failureLogIntervalMs);
    this.redis = redis;
    this.ownsRedis = ownsRedis;
    if (redis) {
      this.everReady = redis.status === 'ready';
      this.firstReady = this.everReady
        ? undefined
        : new Promise<void>((resolve) => {
            redis.once('ready', () => {
              this.everReady = true;
              resolve();
            });
          });
    }
  }

  static create(cfg: RateLimitConfig, opts: RateLimitServiceOptions): RateLimitService {
    const interval = opts.failureLogIntervalMs ?? 10_000;
    if (!cfg.enabled || cfg.store === 'memory') {
      return new RateLimitService(cfg, opts.log, undefined, false, interval);
    }
    if (opts.redis) return new RateLimitService(cfg, opts.log, opts.redis, false, interval);
    if (!cfg.url) throw new Error('rate_limits.store is redis but rate_limits.url is not set');
    const client = new Redis(cfg.url, { ...RATE_LIMIT_REDIS_OPTIONS, lazyConnect: false });
    const service = new RateLimitService(cfg, opts.log, client, true, interval);
    // Our own client: without a listener ioredis prints every failed reconnect attempt.
    client.on('error', (err: Error) => service.health.connectionError(err));
    return service;
  }

  /** Counts the request on every matching rule; throws rate_limited (429) or rate_limit_unavailable (503). */
  async check(subject: RateLimitSubject): Promise<RateLimitDecision> {
    if (!this.cfg.enabled) return NO_LIMITS;
    const candidates = this.rulesFor(subject);
    const n = candidates.length;
    if (n === 0) return NO_LIMITS;

    const rules: CompiledRule[] = [];
    const keys: string[] = [];
    for (let i = 0; i < n; i++) {
      const rule = candidates[i];
      const id = counterIdentity(rule.counter, subject);
      if (id === undefined) continue; // the request carries nothing this rule counts by
      rules.push(rule);
      keys.push(`${subject.tenant.id}:${id}`);
    }
    if (rules.length === 0) return NO_LIMITS;

    let outcomes: Outcome[];
    if (this.redis) {
      outcomes = await this.consumeRedis(rules, keys);
    } else {
      // Memory consumes settle at once: awaiting them in turn is cheaper than Promise.all.
      outcomes = [];
      for (let i = 0; i < rules.length; i++) outcomes.push(await consume(rules[i], rules[i].limiter, keys[i]));
    }

    const failure = outcomes.find((o) => 'error' in o);
    if (failure) {
      this.health.failed('error' in failure ? failure.error : undefined);
      if (this.cfg.on_store_error === 'allow') {
        outcomes = await Promise.all(
          outcomes.map((o, i) => ('error' in o && o.rule.insurance ? consume(o.rule, o.rule.insurance, keys[i]) : o)),
        );
      }
    } else if (this.redis) {
      this.health.ok();
    }
    return decide(outcomes);
  }

  stats(): RateLimitStats {
    return { storeFailures: this.health.failures };
  }

  async close(): Promise<void> {
    this.tenants.clear();
    this.limiters.clear();
    if (this.redis && this.ownsRedis) this.redis.disconnect();
  }

  /** Redis consumes, bounded by timeout_ms as a whole; unfinished ones count as store failures. */
  private async consumeRedis(rules: CompiledRule[], keys: string[]): Promise<Outcome[]> {
    const timeoutMs = this.cfg.timeout_ms;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<typeof TIMED_OUT>((resolve) => {
      timer = setTimeout(resolve, timeoutMs, TIMED_OUT);
    });
    try {
      // Before the first connection is up, give it (part of) the timeout instead of failing the
      // first requests after start-up; once it has been up, a down connection fails at once.
      if (!this.everReady && this.firstReady) {
        if ((await Promise.race([this.firstReady, deadline])) === TIMED_OUT) {
          return rules.map((rule) => ({ rule, error: TIMEOUT_ERROR }));
        }
      }
      return await Promise.all(
        rules.map((rule, i) =>
          Promise.race([consume(rule, rule.limiter, keys[i]), deadline]).then(
            (o): Outcome => (o === TIMED_OUT ? { rule, error: TIMEOUT_ERROR } : o),
          ),
        ),
      );
    } finally {
      clearTimeout(timer);
    }
  }

  /** The compiled rules matching the subject, cached per tenant and (route, key kind, legacy). */
  private rulesFor(subject: RateLimitSubject): CompiledRule[] {
    const tenant = subject.tenant;
    let entry = this.tenants.get(tenant.id);
    if (!entry || entry.tier !== tenant.rate_limit_tier || entry.custom !== tenant.custom_rate_limits || entry.test !== tenant.test) {
      entry = { tier: tenant.rate_limit_tier, custom: tenant.custom_rate_limits, test: tenant.test, all: undefined, selected: new Map() };
      this.tenants.set(tenant.id, entry);
    }
    const sel = `${subject.route}|${subject.keyKind ?? ''}|${subject.legacy === true ? 1 : 0}`;
    let rules = entry.selected.get(sel);
    if (!rules) {
      entry.all ??= resolveRules(entry.tier, entry.custom).map((r) => this.compile(r));
      const facts = { route: subject.route, testTenant: entry.test, keyKind: subject.keyKind, legacy: subject.legacy };
      rules = entry.all.filter((r) => ruleMatches(r.match, facts));
      entry.selected.set(sel, rules);
    }
    return rules;
  }

  /** One limiter per (rule, effective limits), shared by every tenant with those limits. */
  private compile(rule: EffectiveRule): CompiledRule {
    const limits = this.redis ? wholeSeconds(rule.limits) : rule.limits;
    const blockSeconds = limits.mitigation.kind === 'block' ? limits.mitigation.blockSeconds : 0;
    const id = `${rule.name}|${limits.points}|${limits.durationSeconds}|${blockSeconds}`;
    let built = this.limiters.get(id);
    if (!built) {
      const base = {
        keyPrefix: `${this.cfg.key_prefix}${rule.name}`,
        points: limits.points,
        duration: limits.durationSeconds,
        blockDuration: blockSeconds,
      };
      built = this.redis
        ? {
            limiter: new RateLimiterRedis({ ...base, storeClient: this.redis, rejectIfRedisNotReady: true }),
            insurance: this.cfg.on_store_error === 'allow' ? new RateLimiterMemory(base) : undefined,
          }
        : { limiter: new RateLimiterMemory(base), insurance: undefined };
      this.limiters.set(id, built);
      if (limits !== rule.limits) this.log.warn({ rule: rule.name }, 'rate-limit windows on Redis are whole seconds; rounded up');
    }
    return { ...rule, limits, ...built };
  }
}

/**
 * RateLimiterRedis floors windows to whole seconds, and a window of 0 would never expire: round
 * fractional windows up (at least 1 s). Returns `l` itself when nothing changes.
 */
function wholeSeconds(l: RuleLimits): RuleLimits {
  const up = (s: number): number => Math.max(1, Math.ceil(s));
  const m = l.mitigation;
  const durationSeconds = up(l.durationSeconds);
  const blockSeconds = m.kind === 'block' ? up(m.blockSeconds) : 0;
  if (durationSeconds === l.durationSeconds && (m.kind === 'throttle' || blockSeconds === m.blockSeconds)) return l;
  return { points: l.points, durationSeconds, mitigation: m.kind === 'block' ? { kind: 'block', blockSeconds } : m };
}

function consume(rule: CompiledRule, limiter: Limiter, key: string): Promise<Outcome> {
  return limiter.consume(key, 1).then(
    (res) => ({ rule, res, over: false }),
    (e: unknown) => (e instanceof RateLimiterRes ? { rule, res: e, over: true } : { rule, error: e }),
  );
}
