/**
 * The embedded store's data key port: the key ring's wrapped data keys, in the
 * order they were added; the writer thread keeps the first write of a kid.
 */
import type Database from 'better-sqlite3';
import { decodeDataKey } from '../codec.js';
import type { DataKeyPort, WrappedDataKey } from '../types.js';
import type { EmbeddedConnection } from './connection.js';

export class EmbeddedDataKeys implements DataKeyPort {
  readonly #c: EmbeddedConnection;
  readonly #list: Database.Statement<[], { kid: string; wrapped: string; created_at: string }>;

  constructor(connection: EmbeddedConnection) {
    this.#c = connection;
    this.#list = connection.db.prepare<[], { kid: string; wrapped: string; created_at: string }>('SELECT kid, wrapped, created_at FROM data_keys ORDER BY ord');
  }

  async listDataKeys(): Promise<WrappedDataKey[]> {
    return this.#c.run(() => this.#list.all().map((r) => decodeDataKey(r)));
  }

  async addDataKey(key: WrappedDataKey): Promise<WrappedDataKey[]> {
    const copy = { kid: key.kid, wrapped: key.wrapped, created_at: key.created_at };
    return this.#c.write({ op: 'addKey', key: copy }, (v) => (Array.isArray(v) ? v.map((r: unknown) => decodeDataKey(r)) : []));
  }
}
