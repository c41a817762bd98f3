/**
 * The embedded store's reactor result port (store/reactor-results.ts for the
 * semantics): one table, written by the writer thread (its ops run in writer.ts's transactions),
 * read on this thread. Expired rows are dead to every read and deleted by purge (server.ts's
 * purge loop).
 */
import type Database from 'better-sqlite3';
import type { ReactorResultPort, StoredReactorResult } from '../reactor-results.js';
import type { EmbeddedConnection } from './connection.js';

export class EmbeddedReactorResults implements ReactorResultPort {
  readonly #c: EmbeddedConnection;
  #get: Database.Statement<[string, string, number], { sealed: string; expires_ms: number }> | undefined;

  constructor(connection: EmbeddedConnection) {
    this.#c = connection;
  }

  async putReactorResult(e: StoredReactorResult): Promise<void> {
    const entry = { tenant_id: e.tenant_id, id: e.id, sealed: e.sealed, expires_ms: e.expires_ms };
    await this.#c.write({ op: 'reactorResult', action: 'put', entry }, () => undefined);
  }

  async getReactorResult(tenantId: string, id: string): Promise<StoredReactorResult | null> {
    // Prepared at the first read: a file opened for `tokenproxy migrate` has no such table yet.
    const row = this.#c.run(() => {
      this.#get ??= this.#c.db.prepare('SELECT sealed, expires_ms FROM reactor_results WHERE tenant_id = ? AND id = ? AND expires_ms > ?');
      return this.#get.get(tenantId, id, Date.now());
    });
    return row ? { tenant_id: tenantId, id, sealed: row.sealed, expires_ms: Number(row.expires_ms) } : null;
  }

  async purgeReactorResults(now: Date): Promise<number> {
    const ms = now.getTime();
    if (!Number.isFinite(ms)) throw new TypeError('purgeReactorResults: invalid date');
    return this.#c.write({ op: 'reactorResult', action: 'purge', now: ms }, (v) => (typeof v === 'number' ? v : 0));
  }
}
