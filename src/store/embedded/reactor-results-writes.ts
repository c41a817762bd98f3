/**
 * The embedded store's reactor result writes: run only by the
 * writer thread (writer.ts runs these ops inside its transactions), and the table's DDL.
 */
import type Database from 'better-sqlite3';
import type { StoredReactorResult } from '../reactor-results.js';

/**
 * A table of its own, created when a file of the current format (or one opened for `tokenproxy
 * migrate`) is opened, without a format change (schema.ts): an older release ignores it, and a file
 * without it gains it at start. Nothing else in the file is touched.
 */
export const REACTOR_RESULTS_TABLE = `
CREATE TABLE IF NOT EXISTS reactor_results (
  tenant_id TEXT NOT NULL, id TEXT NOT NULL, sealed TEXT NOT NULL, expires_ms INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS reactor_results_by_expiry ON reactor_results (expires_ms);`;

export type ReactorResultOp =
  | { op: 'reactorResult'; action: 'put'; entry: StoredReactorResult }
  | { op: 'reactorResult'; action: 'purge'; now: number };

/** The ops' statements on a connection; the returned function runs inside the caller's transaction. */
export function reactorResultWrites(db: Database.Database): (w: ReactorResultOp) => number {
  // Prepared at the first write: a file opened for `tokenproxy migrate` may not have the table.
  let s: { put: Database.Statement<[string, string, string, number]>; purge: Database.Statement<[number]> } | undefined;
  return (w) => {
    s ??= {
      put: db.prepare(
        `INSERT INTO reactor_results (tenant_id, id, sealed, expires_ms) VALUES (?, ?, ?, ?)
         ON CONFLICT (tenant_id, id) DO UPDATE SET sealed = excluded.sealed, expires_ms = excluded.expires_ms`,
      ),
      purge: db.prepare('DELETE FROM reactor_results WHERE expires_ms <= ?'),
    };
    if (w.action === 'put') return s.put.run(w.entry.tenant_id, w.entry.id, w.entry.sealed, w.entry.expires_ms).changes;
    return s.purge.run(w.now).changes;
  };
}
