/**
 * The embedded store's idempotency entries (store/idempotency.ts): one table, written only by the
 * writer thread (writer.ts runs these ops inside its transactions), so a claim's check and
 * write are one step with respect to every other write, and two requests with one key on this
 * instance cannot both claim it. Expired rows are dead to every op and deleted by `purge`.
 */
import type Database from 'better-sqlite3';

/** Schema version 3 (schema.ts runs it once, inside the migration transaction). */
export const MIGRATE_IDEMPOTENCY = `
CREATE TABLE IF NOT EXISTS idempotency_keys (
  tenant_id TEXT NOT NULL, key TEXT NOT NULL, owner TEXT NOT NULL, state TEXT NOT NULL,
  sealed TEXT NOT NULL, expires_ms INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idempotency_keys_by_expiry ON idempotency_keys (expires_ms);`;

interface SlotParams {
  tenant: string;
  key: string;
  owner: string;
}

export type IdempotencyOp =
  | { op: 'idempotency'; action: 'claim'; slot: SlotParams; sealed: string; expires_ms: number }
  | { op: 'idempotency'; action: 'complete'; slot: SlotParams; sealed: string; expires_ms: number }
  | { op: 'idempotency'; action: 'release'; slot: SlotParams }
  | { op: 'idempotency'; action: 'purge'; now: number };

/** What a claim answers across the thread boundary: null when claimed, else the live entry. */
export type ClaimRow = { state: 'in_flight' | 'done'; sealed: string } | null;

/** The ops' statements on a connection; the returned function runs inside the caller's transaction. */
export function idempotencyWrites(db: Database.Database): (w: IdempotencyOp) => ClaimRow | boolean | number {
  const s = {
    live: db.prepare<[{ tenant: string; key: string; now: number }], { state: 'in_flight' | 'done'; sealed: string }>(
      'SELECT state, sealed FROM idempotency_keys WHERE tenant_id = @tenant AND key = @key AND expires_ms > @now',
    ),
    claim: db.prepare(
      `INSERT INTO idempotency_keys (tenant_id, key, owner, state, sealed, expires_ms) VALUES (@tenant, @key, @owner, 'in_flight', @sealed, @expires_ms)
       ON CONFLICT (tenant_id, key) DO UPDATE SET owner = excluded.owner, state = excluded.state, sealed = excluded.sealed, expires_ms = excluded.expires_ms`,
    ),
    complete: db.prepare(
      `UPDATE idempotency_keys SET state = 'done', sealed = @sealed, expires_ms = @expires_ms
       WHERE tenant_id = @tenant AND key = @key AND owner = @owner AND state = 'in_flight' AND expires_ms > @now`,
    ),
    release: db.prepare(
      `DELETE FROM idempotency_keys WHERE tenant_id = @tenant AND key = @key AND owner = @owner AND state = 'in_flight'`,
    ),
    purge: db.prepare<[number]>('DELETE FROM idempotency_keys WHERE expires_ms <= ?'),
  };
  return (w) => {
    const now = Date.now();
    switch (w.action) {
      case 'claim': {
        const hit = s.live.get({ tenant: w.slot.tenant, key: w.slot.key, now });
        if (hit) return { state: hit.state, sealed: hit.sealed };
        s.claim.run({ ...w.slot, sealed: w.sealed, expires_ms: w.expires_ms });
        return null;
      }
      case 'complete':
        return s.complete.run({ ...w.slot, sealed: w.sealed, expires_ms: w.expires_ms, now }).changes === 1;
      case 'release':
        return s.release.run(w.slot).changes === 1;
      case 'purge':
        return s.purge.run(w.now).changes;
    }
  };
}
