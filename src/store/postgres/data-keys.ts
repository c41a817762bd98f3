/**
 * The key ring's wrapped data keys in PostgreSQL: oldest first by insertion order; a
 * kid is stored once (two instances rotating at once both land on the first one written).
 */
import type pg from 'pg';
import { decodeDataKey } from '../codec.js';
import type { DataKeyPort, WrappedDataKey } from '../types.js';
import { query } from './pool.js';

export class PostgresDataKeys implements DataKeyPort {
  constructor(private readonly pool: pg.Pool) {}

  async listDataKeys(): Promise<WrappedDataKey[]> {
    const r = await query(this.pool, 'SELECT kid, wrapped, created_at FROM tokenproxy.data_keys ORDER BY ord');
    return r.rows.map((row) => decodeDataKey(row));
  }

  async addDataKey(key: WrappedDataKey): Promise<WrappedDataKey[]> {
    await query(this.pool, 'INSERT INTO tokenproxy.data_keys (kid, wrapped, created_at) VALUES ($1, $2, $3) ON CONFLICT (kid) DO NOTHING', [
      key.kid, key.wrapped, key.created_at,
    ]);
    return this.listDataKeys();
  }
}
