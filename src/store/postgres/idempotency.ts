/**
 * Idempotency entries in PostgreSQL. One row per
 * slot. A claim is one upsert that takes the slot only when it is free or its entry has expired,
 * so of two requests with one key (on any instances) one claims it; the other reads the live entry.
 * Expired rows are dead to every operation and deleted by purge.
 */
import type pg from 'pg';
import type { IdempotencyClaim, IdempotencyPort, IdempotencySlot } from '../idempotency.js';
import { StoreUnavailableError } from '../types.js';
import { query } from './pool.js';

const I = 'tokenproxy.idempotency_keys';

export class PostgresIdempotency implements IdempotencyPort {
  constructor(private readonly pool: pg.Pool) {}

  async claimIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<IdempotencyClaim> {
    // A live entry seen as free by the upsert can expire or be released before it is read: again.
    for (let attempt = 0; attempt < 5; attempt++) {
      const now = Date.now();
      const taken = await query(
        this.pool,
        `INSERT INTO ${I} AS i (tenant_id, key, owner, state, sealed, expires_ms) VALUES ($1, $2, $3, 'in_flight', $4, $5)
         ON CONFLICT (tenant_id, key) DO UPDATE SET owner = excluded.owner, state = excluded.state, sealed = excluded.sealed,
           expires_ms = excluded.expires_ms
         WHERE i.expires_ms <= $6 RETURNING 1`,
        [slot.tenant_id, slot.key, owner, sealed, now + ttlMs, now],
      );
      if (taken.rowCount === 1) return { state: 'claimed' };
      const held = await query<{ state: 'in_flight' | 'done'; sealed: string }>(
        this.pool, `SELECT state, sealed FROM ${I} WHERE tenant_id = $1 AND key = $2 AND expires_ms > $3`, [slot.tenant_id, slot.key, Date.now()],
      );
      const row = held.rows[0];
      if (row) return { state: row.state, sealed: row.sealed };
    }
    throw new StoreUnavailableError('the idempotency entry kept changing');
  }

  async completeIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<boolean> {
    const now = Date.now();
    const r = await query(
      this.pool,
      `UPDATE ${I} SET state = 'done', sealed = $4, expires_ms = $5
       WHERE tenant_id = $1 AND key = $2 AND owner = $3 AND state = 'in_flight' AND expires_ms > $6`,
      [slot.tenant_id, slot.key, owner, sealed, now + ttlMs, now],
    );
    return r.rowCount === 1;
  }

  async releaseIdempotencyKey(slot: IdempotencySlot, owner: string): Promise<boolean> {
    const r = await query(this.pool, `DELETE FROM ${I} WHERE tenant_id = $1 AND key = $2 AND owner = $3 AND state = 'in_flight'`, [
      slot.tenant_id, slot.key, owner,
    ]);
    return r.rowCount === 1;
  }

  async purgeIdempotencyKeys(now: Date): Promise<number> {
    const ms = now.getTime();
    if (!Number.isFinite(ms)) throw new TypeError('purgeIdempotencyKeys: invalid date');
    const r = await query(this.pool, `DELETE FROM ${I} WHERE expires_ms <= $1`, [ms]);
    return r.rowCount ?? 0;
  }
}
