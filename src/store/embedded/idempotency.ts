/**
 * The embedded store's idempotency port: every op is a write of the writer
 * thread (idempotency-writes.ts runs it inside the group's transaction), so a claim's check and
 * write are one step with respect to every other write.
 */
import type { IdempotencyClaim, IdempotencyPort, IdempotencySlot } from '../idempotency.js';
import type { EmbeddedConnection } from './connection.js';
import type { ClaimRow } from './idempotency-writes.js';

export class EmbeddedIdempotency implements IdempotencyPort {
  readonly #c: EmbeddedConnection;

  constructor(connection: EmbeddedConnection) {
    this.#c = connection;
  }

  async claimIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<IdempotencyClaim> {
    const op = { op: 'idempotency', action: 'claim', slot: { tenant: slot.tenant_id, key: slot.key, owner }, sealed, expires_ms: Date.now() + ttlMs } as const;
    return this.#c.write(op, (v) => (v as ClaimRow) ?? { state: 'claimed' });
  }

  async completeIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<boolean> {
    const op = { op: 'idempotency', action: 'complete', slot: { tenant: slot.tenant_id, key: slot.key, owner }, sealed, expires_ms: Date.now() + ttlMs } as const;
    return this.#c.write(op, (v) => v === true);
  }

  async releaseIdempotencyKey(slot: IdempotencySlot, owner: string): Promise<boolean> {
    return this.#c.write({ op: 'idempotency', action: 'release', slot: { tenant: slot.tenant_id, key: slot.key, owner } }, (v) => v === true);
  }

  async purgeIdempotencyKeys(now: Date): Promise<number> {
    const ms = now.getTime();
    if (!Number.isFinite(ms)) throw new TypeError('purgeIdempotencyKeys: invalid date');
    return this.#c.write({ op: 'idempotency', action: 'purge', now: ms }, (v) => (typeof v === 'number' ? v : 0));
  }
}
