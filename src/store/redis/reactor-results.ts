/**
 * The Redis store's reactor result port:
 * `P t:{T}:rr:<id>` holds the sealed entry and expires by itself (PX), so nothing is purged.
 */
import type { ReactorResultPort, StoredReactorResult } from '../reactor-results.js';
import { StoreUnavailableError } from '../types.js';
import type { RedisConnection } from './connection.js';

/** Written through a script: `store.wait_replicas` applies to it as to every other write. */
const PUT = `redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1`;
/** The value and its remaining life in one step (an entry read just before it expires says so). */
const GET = `local v = redis.call('GET', KEYS[1]) if not v then return false end return {v, redis.call('PTTL', KEYS[1])}`;

export class RedisReactorResults implements ReactorResultPort {
  readonly #c: RedisConnection;

  constructor(connection: RedisConnection) {
    this.#c = connection;
  }

  async putReactorResult(e: StoredReactorResult): Promise<void> {
    const ttl = Math.max(1, Math.ceil(e.expires_ms - Date.now()));
    await this.#c.eval(PUT, [this.#c.t(e.tenant_id, 'rr', e.id)], [e.sealed, String(ttl)], true);
  }

  async getReactorResult(tenantId: string, id: string): Promise<StoredReactorResult | null> {
    const v = await this.#c.eval(GET, [this.#c.t(tenantId, 'rr', id)], []);
    if (v === null || v === undefined) return null;
    if (!Array.isArray(v) || typeof v[0] !== 'string') throw new StoreUnavailableError('a stored reactor result is corrupt');
    const ttl = Number(v[1]);
    if (!(ttl > 0)) return null;
    return { tenant_id: tenantId, id, sealed: v[0], expires_ms: Date.now() + ttl };
  }

  /** Redis expires reactor results by itself (PX): nothing to purge. */
  async purgeReactorResults(): Promise<number> {
    return 0;
  }
}
