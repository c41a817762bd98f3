/**
 * The rate-limit service: built once at start-up from `rate_limits` config, asked once per request
 * (after authentication, before the body is read) with the request's subject.
 *
 *   const limits = await RateLimitService.create(config.rate_limits, { log, redis });
 *   const { headers } = await limits.check({ tenant, route: 'tokenize', clientIp, apiKeyId, keyKind });
 *   // set `headers` on the response; a 429 / 503 is thrown as a ServiceError carrying its headers
 *
 * Every rule of `rules.ts` that matches the request counts it (one point each); the strictest
 * decides (docs/rate-limits.md): any rule over its limit → 429 with the longest wait; otherwise
 * the RateLimit-* headers describe the rule with the fewest points left.
 *
 * Stores: rate-limiter-flexible's RateLimiterMemory (one instance; RateLimiterCluster in the
 * workers of `server.workers > 1`, counters in the primary), RateLimiterRedis (counters shared by
 * every instance on one Redis node, Redis Cluster or Sentinel setup: src/redis/connect.ts) or
 * RateLimiterPostgres on the token store's pool. Every
 * counter touches one key (a script, or a MULTI on that key for a block), so a Cluster needs no
 * cross-slot command; the tenant is the key's hash tag (`<prefix><rule>:{<tenant>}:<identity>`),
 * which keeps one tenant's counters in one slot and spreads tenants over the shards. rate-limiter-flexible resolves a consume with a
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
 *
 * PostgreSQL down: the same two modes, the same `timeout_ms` bound and the same logs.
 * The pool fails a query at once when the server refuses connections; a server that does not
 * answer holds the check until `timeout_ms` (the statement itself waits in the pool up to its own
 * connect and query timeouts, then fails). The pool opens new connections once PostgreSQL is
 * back: limits work again without a restart.
 */
import type { Cluster, Redis } from 'ioredis';
import cluster from 'node:cluster';
import { addressBlock } from '../net/client-ip.js';
import { RateLimiterCluster, RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { DEFAULT_RATE_LIMIT_TABLE, type Config } from '../config/schema.js';
import type { Logger } from '../log.js';
import { decide, NO_LIMITS, type Outcome as AnyOutcome, type RateLimitDecision } from './decide.js';
import { StoreHealth } from './store-health.js';
import type { PostgresCounters } from './postgres.js';
import type pg from 'pg';
import type { Store } from '../store/types.js';
import {
  ruleMatches,
  type Counter,
  type EffectiveRule,
  type KeyKind,
  type RouteGroup,
  type RuleLimits,
} from './rules.js';

export type { RouteGroup, KeyKind, Tier } from './rules.js';
export type { RateLimitDecision } from './decide.js';

/** The `rate_limits` section; `table` (PostgreSQL only) may be left out by callers that build it in code. */
export type RateLimitConfig = Omit<Config['rate_limits'], 'table'> & { table?: string };

/** The tenant fields the limits depend on (the model's Tenant fits). */
export interface RateLimitTenant {
  id: string;
  test: boolean;
  /** Its tier's rules with its custom overrides merged (rules.ts compileRateTable, at compile time). */
  rateTable: readonly EffectiveRule[];
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
  /** A shared ioredis client; without one, `store: redis` connects to `url`, `cluster` or `sentinel` itself. */
  redis?: Redis | Cluster;
  /** `store: postgres`: the token store's pool (postgresPoolOf), required; the service never closes it. */
  postgres?: pg.Pool;
  /** Store failures are logged at most once per this interval (default 10 s). */
  failureLogIntervalMs?: number;
  /** `server.ipv6_prefix`: per-IP rules count an IPv6 client by its network of this many bits (default 64). */
  ipv6Prefix?: number;
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

/** What the service asks of a limiter (a RateLimiterAbstract, or a WorkerLimiter around one). */
/** How long after an unexpected 'end' the limiter's own client connects again. */
const RESTART_ENDED_CLIENT_MS = 200;

type Limiter = Pick<RateLimiterAbstract, 'consume'>;

/** A limiter and its users: the tenant entries whose compiled rules hold it. */
interface Built {
  limiter: Limiter;
  insurance: Limiter | undefined;
  refs: number;
  /** Releases what the limiter holds beyond memory (a worker's IPC listener). */
  dispose?: () => void;
}

interface CompiledRule extends EffectiveRule {
  /** The limiter's key in RateLimitService.limiters. */
  limiterId: string;
  limiter: Limiter;
  /** Per-instance fallback in `allow` mode with a Redis or PostgreSQL store. */
  insurance: Limiter | undefined;
}

interface TenantEntry {
  table: RateLimitTenant['rateTable'];
  test: boolean;
  /** Every rule of the tenant, compiled (each holds one reference to its limiter). */
  rules: CompiledRule[];
  /** Matching rules by `route|keyKind|legacy`. */
  selected: Map<string, CompiledRule[]>;
}

type Outcome = AnyOutcome<CompiledRule>;

const TIMED_OUT: unique symbol = Symbol('timed out');
const TIMEOUT_ERROR = new Error('rate-limit store timed out');

/**
 * The token store's pool when the token store is PostgreSQL (`rate_limits.store: postgres` counts
 * on it), else undefined. Read through the instance, not an import of the store's module, so the
 * rate limits do not depend on where that module lives and a service on another store never
 * loads pg.
 */
export function postgresPoolOf(store: Store): pg.Pool | undefined {
  return store.kind === 'postgres' && 'pool' in store ? (store as { pool: pg.Pool }).pool : undefined;
}

/** `client`: the subject's client address as per-IP rules count it (`addressBlock`). */
function counterIdentity(counter: Counter, s: RateLimitSubject, client: string): string | undefined {
  switch (counter) {
    case 'api_key':
      return s.apiKeyId;
    case 'api_key_ip':
      return s.apiKeyId === undefined ? undefined : `${s.apiKeyId}|${client}`;
    case 'proxy_key':
      return s.proxyKeyId;
    case 'ip':
      return client;
  }
}

export class RateLimitService {
  private readonly tenants = new Map<string, TenantEntry>();
  /** By limiter id; an entry goes when no tenant entry uses it any more (see release). */
  private readonly limiters = new Map<string, Built>();
  private readonly redis: Redis | Cluster | undefined;
  private readonly ownsRedis: boolean;
  private postgres: PostgresCounters | undefined;
  private readonly firstReady: Promise<void> | undefined;
  private readonly health: StoreHealth;
  private everReady = false;
  private closing = false;

  private constructor(
    private readonly cfg: RateLimitConfig,
    private readonly log: Logger,
    redis: Redis | Cluster | undefined,
    ownsRedis: boolean,
    failureLogIntervalMs: number,
    private readonly ipv6Prefix: number,
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

  /**
   * The service for `cfg`. Async because a Redis or PostgreSQL counter store loads its client
   * (ioredis, pg) here, on demand: a service on the memory store never loads either.
   */
  static async create(cfg: RateLimitConfig, opts: RateLimitServiceOptions): Promise<RateLimitService> {
    const interval = opts.failureLogIntervalMs ?? 10_000;
    const prefix = opts.ipv6Prefix ?? 64;
    if (!cfg.enabled || cfg.store === 'memory') {
      return new RateLimitService(cfg, opts.log, undefined, false, interval, prefix);
    }
    if (cfg.store === 'postgres') {
      if (!opts.postgres) throw new Error('rate_limits.store is postgres but the token store is not PostgreSQL (store.kind: postgres)');
      const { PostgresCounters } = await import('./postgres.js');
      const service = new RateLimitService(cfg, opts.log, undefined, false, interval, prefix);
      service.postgres = new PostgresCounters(opts.postgres, cfg.table ?? DEFAULT_RATE_LIMIT_TABLE);
      // The table now, not in the first check's timeout_ms: creating it writes the catalog and
      // waits for a commit, which on a busy server took longer than the default 200 ms.
      service.postgres.ensureTable().catch(() => undefined);
      return service;
    }
    if (opts.redis) return new RateLimitService(cfg, opts.log, opts.redis, false, interval, prefix);
    if (!cfg.url && !cfg.cluster && !cfg.sentinel) throw new Error('rate_limits.store is redis but none of rate_limits.url, cluster and sentinel is set');
    // Our own fail-fast options on every topology: on a Cluster, enableOfflineQueue: false makes a
    // command for a shard whose connection is down fail at once (as on one node) instead of waiting.
    const { createRedisClient } = await import('../redis/connect.js');
    const client = createRedisClient(cfg, { ...RATE_LIMIT_REDIS_OPTIONS, lazyConnect: false });
    const service = new RateLimitService(cfg, opts.log, client, true, interval, prefix);
    // Our own client: without a listener ioredis prints every failed reconnect attempt. A Cluster
    // reports a shard's connection errors as 'node error'.
    client.on('error', (err: Error) => service.health.connectionError(err));
    client.on('node error', (err: Error) => service.health.connectionError(err));
    // An ioredis client that has ended never reconnects by itself. It should only end when we
    // close it; with Sentinel, ioredis 6 ended it when its failover detector (+switch-master)
    // fired while a reconnect was asking the sentinels for the primary (about one failover in
    // three with 40 clients here). src/redis/connect.ts no longer turns the detector on; this
    // stays as a guard, since without it every check would be a store failure until a restart.
    client.on('end', () => {
      if (service.closing) return;
      service.health.connectionError(new Error('the Redis client ended; connecting again'));
      setTimeout(() => {
        if (!service.closing && client.status === 'end') client.connect().catch(() => undefined);
      }, RESTART_ENDED_CLIENT_MS).unref();
    });
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
    // an IPv6 client is counted by its /64 (or server.ipv6_prefix), not the full address.
    const client = addressBlock(subject.clientIp, this.ipv6Prefix);
    for (let i = 0; i < n; i++) {
      const rule = candidates[i];
      const id = counterIdentity(rule.counter, subject, client);
      if (id === undefined) continue; // the request carries nothing this rule counts by
      rules.push(rule);
      // The tenant is the hash tag: on a Cluster one tenant's counters share a slot, tenants spread
      // over the shards (the loader refuses a `{` or `}` in key_prefix there, which would take over).
      keys.push(`{${subject.tenant.id}}:${id}`);
    }
    if (rules.length === 0) return NO_LIMITS;

    let outcomes: Outcome[];
    if (this.redis || this.postgres) {
      outcomes = await this.consumeShared(rules, keys);
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
    } else if (this.redis || this.postgres) {
      this.health.ok();
    }
    return decide(outcomes);
  }

  /**
   * Resolves once the store can count (PostgreSQL: the counters' table exists) or that failed (a
   * check tries again then); never rejects. startService waits for it before it listens.
   */
  async ready(redisWaitMs = 0): Promise<void> {
    await this.postgres?.ensureTable().catch(() => undefined);
    // A caller that wants its first check counted, not refused while the client still connects
    // (tests on a loaded machine), waits for the Redis client's first connection, bounded.
    if (redisWaitMs > 0 && this.firstReady && !this.everReady) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.firstReady, new Promise<void>((resolve) => (timer = setTimeout(resolve, redisWaitMs)))]);
      clearTimeout(timer);
    }
  }

  stats(): RateLimitStats {
    return { storeFailures: this.health.failures };
  }

  /**
   * Forgets the tenants not in `ids` (called after a reload) and the limiters only they used, so
   * a config that keeps changing does not keep adding limiters. The current tenants' entries are
   * brought up to date by their next check (rulesFor).
   */
  retain(ids: Iterable<string>): void {
    const keep = new Set(ids);
    for (const [id, entry] of this.tenants) {
      if (keep.has(id)) continue;
      this.tenants.delete(id);
      this.release(entry);
    }
  }

  /** How many limiters are built (for tests: it must not grow with every reload). */
  limiterCount(): number {
    return this.limiters.size;
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const entry of this.tenants.values()) this.release(entry);
    this.tenants.clear();
    if (this.redis && this.ownsRedis) this.redis.disconnect();
    this.postgres?.close();
  }

  /** Redis or PostgreSQL consumes, bounded by timeout_ms as a whole; unfinished ones count as store failures. */
  private async consumeShared(rules: CompiledRule[], keys: string[]): Promise<Outcome[]> {
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
      // PostgreSQL: the counters' table before the first update (within the same bound); a failed
      // creation is a store failure of this check and is tried again by the next one.
      if (this.postgres && !this.postgres.ready) {
        const made = await Promise.race([this.postgres.ensureTable().then(() => undefined, (e: unknown) => (e instanceof Error ? e : new Error(String(e)))), deadline]);
        if (made !== undefined) return rules.map((rule) => ({ rule, error: made === TIMED_OUT ? TIMEOUT_ERROR : made }));
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
    if (!entry || entry.table !== tenant.rateTable || entry.test !== tenant.test) {
      const old = entry;
      // A reload gives every tenant a new table: compile the new rules before releasing the old
      // ones, so a limiter whose limits did not change is kept, with its counters.
      entry = {
        table: tenant.rateTable, test: tenant.test,
        rules: tenant.rateTable.map((r) => this.compile(r)),
        selected: new Map(),
      };
      this.tenants.set(tenant.id, entry);
      if (old) this.release(old);
    }
    const sel = `${subject.route}|${subject.keyKind ?? ''}|${subject.legacy === true ? 1 : 0}`;
    let rules = entry.selected.get(sel);
    if (!rules) {
      const facts = { route: subject.route, testTenant: entry.test, keyKind: subject.keyKind, legacy: subject.legacy };
      rules = entry.rules.filter((r) => ruleMatches(r.match, facts));
      entry.selected.set(sel, rules);
    }
    return rules;
  }

  /** Drops an entry's references; a limiter nobody uses any more is forgotten and disposed. */
  private release(entry: TenantEntry): void {
    for (const rule of entry.rules) {
      const built = this.limiters.get(rule.limiterId);
      if (!built || --built.refs > 0) continue;
      this.limiters.delete(rule.limiterId);
      built.dispose?.();
    }
  }

  /** One limiter per (rule, effective limits), shared by every tenant with those limits. */
  private compile(rule: EffectiveRule): CompiledRule {
    const limits = this.redis ? wholeSeconds(rule.limits) : this.postgres ? wholeMilliseconds(rule.limits) : rule.limits;
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
      const insurance = (this.redis || this.postgres) && this.cfg.on_store_error === 'allow' ? new RateLimiterMemory(base) : undefined;
      built = this.redis
        ? { limiter: new RateLimiterRedis({ ...base, storeClient: this.redis, rejectIfRedisNotReady: true }), insurance, refs: 0 }
        : this.postgres
          ? { limiter: this.postgres.limiter(base), insurance, refs: 0 }
          : { ...memoryLimiter(base, id), insurance: undefined, refs: 0 };
      this.limiters.set(id, built);
      if (limits !== rule.limits) {
        this.log.warn({ rule: rule.name }, this.redis ? 'rate-limit windows on Redis are whole seconds; rounded up' : 'rate-limit windows on PostgreSQL are whole milliseconds; rounded up');
      }
    }
    built.refs++;
    return { ...rule, limits, limiterId: id, limiter: built.limiter, insurance: built.insurance };
  }
}

/**
 * The memory store's limiter. In a worker of `server.workers > 1` the counters live in the primary
 * (RateLimiterClusterMaster, src/cluster.ts) and every worker consumes them over IPC, so a limit is
 * exact across workers. The primary keeps one counter set per keyPrefix, created with the options
 * of the first worker that names it: the prefix carries the limits too (`id`), as limiters with
 * the same rule name and other limits (a custom override) are separate counters here as well.
 */
function memoryLimiter(base: { keyPrefix: string; points: number; duration: number; blockDuration: number }, id: string): Pick<Built, 'limiter' | 'dispose'> {
  if (!cluster.isWorker) return { limiter: new RateLimiterMemory(base) };
  const limiter = new WorkerLimiter({ ...base, keyPrefix: `${base.keyPrefix}|${id}` });
  return { limiter, dispose: () => limiter.dispose() };
}

/**
 * A RateLimiterCluster that can be let go. Each one adds a `process.on('message')` listener for
 * the primary's answers and never removes it (and raises the process's listener limit to
 * unlimited, so nothing warns): without this, every limiter a reload creates would stay
 * reachable, with its listener run on every IPC message, for the life of the worker. The
 * listener is found as the one its constructor added; dispose removes it once no consume is
 * waiting for an answer, and a consume after dispose (a request still holding the old rules)
 * puts it back for as long as it waits. The primary keeps the counters under the prefix, so a
 * limiter built again with the same id goes on counting where this one stopped.
 */
class WorkerLimiter implements Limiter {
  private readonly inner: RateLimiterCluster;
  private readonly listener: (...args: unknown[]) => void;
  private pending = 0;
  private disposed = false;
  private attached = true;

  constructor(opts: ConstructorParameters<typeof RateLimiterCluster>[0]) {
    const before = new Set(process.listeners('message'));
    this.inner = new RateLimiterCluster(opts);
    const added = process.listeners('message').filter((l) => !before.has(l));
    if (added.length !== 1) throw new Error(`RateLimiterCluster added ${added.length} message listeners, expected 1`);
    this.listener = added[0] as (...args: unknown[]) => void;
  }

  consume(key: string | number, points?: number): Promise<RateLimiterRes> {
    if (!this.attached) {
      process.on('message', this.listener);
      this.attached = true;
    }
    this.pending++;
    const settled = (): void => {
      if (--this.pending === 0 && this.disposed) this.detach();
    };
    const p = this.inner.consume(key, points);
    p.then(settled, settled);
    return p;
  }

  dispose(): void {
    this.disposed = true;
    if (this.pending === 0) this.detach();
  }

  private detach(): void {
    if (!this.attached) return;
    process.off('message', this.listener);
    this.attached = false;
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

/**
 * RateLimiterPostgres stores a window's end as a bigint of milliseconds: a window with a fraction
 * of a millisecond would make every update fail. Rounds up (at least 1 ms); `l` itself when
 * nothing changes.
 */
function wholeMilliseconds(l: RuleLimits): RuleLimits {
  const up = (s: number): number => Math.max(1, Math.ceil(s * 1000)) / 1000;
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
