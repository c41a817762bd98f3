/**
 * Asynchronous reactor results in PostgreSQL (store/reactor-results.ts for the
 * semantics): one row per call (schema version 3), replaced by its result; expired rows are dead
 * to every read and deleted by purge (server.ts's purge loop).
 */
import type pg from 'pg';
import type { ReactorResultPort, StoredReactorResult } from '../reactor-results.js';
import { query } from './pool.js';

const R = 'tokenproxy.reactor_results';

export class PostgresReactorResults implements ReactorResultPort {
  constructor(private readonly pool: pg.Pool) {}

  async putReactorResult(e: StoredReactorResult): Promise<void> {
    await query(
      this.pool,
      `INSERT INTO ${R} (tenant_id, id, sealed, expires_ms) VALUES ($1, $2, $3, $4)
       ON CONFLICT (tenant_id, id) DO UPDATE SET sealed = excluded.sealed, expires_ms = excluded.expires_ms`,
      [e.tenant_id, e.id, e.sealed, e.expires_ms],
    );
  }

  async getReactorResult(tenantId: string, id: string): Promise<StoredReactorResult | null> {
    const r = await query<{ sealed: string; expires_ms: string }>(
      this.pool, `SELECT sealed, expires_ms FROM ${R} WHERE tenant_id = $1 AND id = $2 AND expires_ms > $3`, [tenantId, id, Date.now()],
    );
    const row = r.rows[0];
    return row ? { tenant_id: tenantId, id, sealed: row.sealed, expires_ms: Number(row.expires_ms) } : null;
  }

  async purgeReactorResults(now: Date): Promise<number> {
    const ms = now.getTime();
    if (!Number.isFinite(ms)) throw new TypeError('purgeReactorResults: invalid date');
    const r = await query(this.pool, `DELETE FROM ${R} WHERE expires_ms <= $1`, [ms]);
    return r.rowCount ?? 0;
  }
}
