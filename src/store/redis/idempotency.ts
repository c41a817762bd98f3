/**
 * The Redis store's idempotency port: one hash per slot, expiring by itself;
 * each op one script (idempotency-scripts.ts).
 */
import type { IdempotencyClaim, IdempotencyPort, IdempotencySlot } from '../idempotency.js';
import { StoreUnavailableError } from '../types.js';
import type { RedisConnection } from './connection.js';
import * as idem from './idempotency-scripts.js';

export class RedisIdempotency implements IdempotencyPort {
  readonly #c: RedisConnection;

  constructor(connection: RedisConnection) {
    this.#c = connection;
  }

  async claimIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<IdempotencyClaim> {
    const v = await this.#c.eval(idem.CLAIM, [this.#c.t(slot.tenant_id, 'idem', slot.key)], [owner, sealed, String(Math.max(1, Math.ceil(ttlMs)))], true);
    if (!Array.isArray(v)) throw new StoreUnavailableError('a stored idempotency entry is corrupt');
    if (v[0] === 'claimed') return { state: 'claimed' };
    if ((v[0] === 'in_flight' || v[0] === 'done') && typeof v[1] === 'string') return { state: v[0], sealed: v[1] };
    throw new StoreUnavailableError('a stored idempotency entry is corrupt');
  }

  async completeIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<boolean> {
    const ttl = String(Math.max(1, Math.ceil(ttlMs)));
    return Number(await this.#c.eval(idem.COMPLETE, [this.#c.t(slot.tenant_id, 'idem', slot.key)], [owner, sealed, ttl], true)) === 1;
  }

  async releaseIdempotencyKey(slot: IdempotencySlot, owner: string): Promise<boolean> {
    return Number(await this.#c.eval(idem.RELEASE, [this.#c.t(slot.tenant_id, 'idem', slot.key)], [owner], true)) === 1;
  }

  /** Redis expires idempotency entries by itself (PEXPIRE): nothing to purge. */
  async purgeIdempotencyKeys(): Promise<number> {
    return 0;
  }
}
