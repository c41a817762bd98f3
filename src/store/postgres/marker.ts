/**
 * The PostgreSQL store's marker (store/identity.ts): one row of `tokenproxy.store_marker`, a
 * table created at connect (schema.ts) without a schema version of its own, so an older release
 * ignores it. A database dropped and recreated has no `tokenproxy` schema at all: read as no marker.
 */
import type pg from 'pg';
import type { MarkerPort, StoreMarker } from '../types.js';
import { StoreUnavailableError } from '../types.js';
import { query } from './pool.js';

/** The schema or the table is gone (3F000 invalid_schema_name, 42P01 undefined_table). */
function missing(err: unknown): boolean {
  const code = err instanceof StoreUnavailableError ? (err.cause as { code?: unknown } | undefined)?.code : undefined;
  return code === '3F000' || code === '42P01';
}

interface Row {
  id: string;
  created_at: string;
  lost_at: string | null;
}

function decode(row: Row | undefined): StoreMarker | null {
  if (!row) return null;
  return { id: row.id, created_at: row.created_at, ...(row.lost_at ? { lost_at: row.lost_at } : {}) };
}

export class PostgresMarker implements MarkerPort {
  constructor(private readonly pool: pg.Pool) {}

  async readMarker(): Promise<StoreMarker | null> {
    try {
      return decode((await query<Row>(this.pool, 'SELECT id, created_at, lost_at FROM tokenproxy.store_marker')).rows[0]);
    } catch (err) {
      if (missing(err)) return null;
      throw err;
    }
  }

  async createMarker(marker: StoreMarker): Promise<StoreMarker> {
    await query(this.pool, 'INSERT INTO tokenproxy.store_marker (id, created_at) VALUES ($1, $2) ON CONFLICT (one) DO NOTHING', [marker.id, marker.created_at]);
    const found = await this.readMarker();
    if (!found) throw new StoreUnavailableError('the PostgreSQL store marker could not be written');
    return found;
  }

  async markLost(marker: StoreMarker): Promise<void> {
    await query(this.pool,
      'INSERT INTO tokenproxy.store_marker (id, created_at, lost_at) VALUES ($1, $2, $3) ON CONFLICT (one) DO UPDATE SET lost_at = excluded.lost_at WHERE store_marker.id = excluded.id',
      [marker.id, marker.created_at, marker.lost_at ?? new Date().toISOString()]);
  }

  async clearMarker(): Promise<void> {
    await query(this.pool, 'DELETE FROM tokenproxy.store_marker');
  }

  async holdsRecords(): Promise<boolean> {
    try {
      const r = await query<{ any: boolean }>(this.pool,
        'SELECT EXISTS (SELECT 1 FROM tokenproxy.tokens) OR EXISTS (SELECT 1 FROM tokenproxy.audit_events) AS any');
      return r.rows[0]?.any === true;
    } catch (err) {
      if (missing(err)) return false;
      throw err;
    }
  }

  /** A connection the pool let go of (dropped, terminated, or idle for long): the next call checks. */
  onDisconnect(fn: () => void): void {
    this.pool.on('remove', fn);
    this.pool.on('error', fn);
  }
}
