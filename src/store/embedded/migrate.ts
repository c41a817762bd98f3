/**
 * The embedded store's conversion from format 5 (JSON records) to format 6 (format.ts), for
 * `tokenproxy migrate`, with the service stopped.
 *
 * Into new tables, then a swap: format 6's tables have names of their own (vault_*, dict), so both
 * formats live side by side in the file while it converts. Each step is one IMMEDIATE transaction
 * that converts the next `batch` tokens in seq order and writes them with their seq kept (list
 * order and the deduplication "oldest" stay as they were); the progress is the highest seq in
 * vault_tokens, written by the same transaction, so a process killed with -9 at any point leaves
 * whole steps only and the next run goes on from there. The last step, again one transaction,
 * checks that both tables hold the same number of tokens, drops the format 5 token tables and
 * sets the version to 6; then VACUUM gives the space back to the file system (atomic too).
 * Nothing is decrypted: ciphertext and digests are repacked as they are.
 *
 * The service refuses a file of format 5 (schema.ts), so nothing else writes during the
 * conversion; the count check catches a format 5 service that wrote anyway.
 */
import type Database from 'better-sqlite3';
import { decodeRecord } from '../codec.js';
import type { FormatMigrator } from '../types.js';
import { SCHEMA_V6, TokenWrites, toColumns } from './format.js';
import { LEGACY_VERSION, SCHEMA_VERSION, schemaVersion, upgradeToLegacy } from './schema.js';
import { retryBusy } from './writer.js';

interface LegacyRow {
  seq: number;
  record: string;
  cvc_sealed: string | null;
  dedupe_key: string | null;
}

const hasTable = (db: Database.Database, name: string): boolean =>
  db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(name) !== undefined;

const count = (db: Database.Database, sql: string): number => (db.prepare(sql).get() as { n: number }).n;

/** The highest seq converted so far (0 before the first step). */
const PROGRESS = 'SELECT coalesce(max(seq), 0) AS n FROM vault_tokens';

export class EmbeddedMigrator implements FormatMigrator {
  readonly #db: Database.Database;

  constructor(db: Database.Database) {
    this.#db = db;
  }

  async status(): Promise<{ from: number; to: number; pending: number; total: number }> {
    const db = this.#db;
    const from = schemaVersion(db);
    if (from >= SCHEMA_VERSION || !hasTable(db, 'tokens')) {
      const total = hasTable(db, 'vault_tokens') ? count(db, 'SELECT count(*) AS n FROM vault_tokens') : 0;
      return { from, to: SCHEMA_VERSION, pending: 0, total };
    }
    const total = count(db, 'SELECT count(*) AS n FROM tokens');
    const done = hasTable(db, 'vault_tokens') ? count(db, PROGRESS) : 0;
    const pending = count(db, `SELECT count(*) AS n FROM tokens WHERE seq > ${Number(done)}`);
    return { from, to: SCHEMA_VERSION, pending, total };
  }

  async step(batch: number): Promise<{ converted: number; done: boolean }> {
    if (!Number.isSafeInteger(batch) || batch < 1) throw new RangeError('batch must be a positive integer');
    const db = this.#db;
    if (schemaVersion(db) >= SCHEMA_VERSION) return { converted: 0, done: true };
    const run = db.transaction((): { converted: number; done: boolean } => {
      upgradeToLegacy(db);
      db.exec(SCHEMA_V6);
      const writes = new TokenWrites(db);
      const rows = db
        .prepare<[number, number], LegacyRow>('SELECT seq, record, cvc_sealed, dedupe_key FROM tokens WHERE seq > ? ORDER BY seq LIMIT ?')
        .all(count(db, PROGRESS), batch);
      for (const row of rows) {
        const r = decodeRecord(row.record, row.cvc_sealed);
        writes.insert(toColumns(r), r, row.dedupe_key !== null, row.seq);
      }
      if (rows.length > 0) return { converted: rows.length, done: false };
      const before = count(db, 'SELECT count(*) AS n FROM tokens');
      const after = count(db, 'SELECT count(*) AS n FROM vault_tokens');
      if (before !== after) {
        throw new Error(`the conversion holds ${after} token(s) where format ${LEGACY_VERSION} holds ${before}: something wrote to the store during the migration; stop every tokenproxy process using it and run tokenproxy migrate again`);
      }
      db.exec('DROP TABLE token_index_hashes; DROP TABLE token_metadata; DROP TABLE tokens;');
      db.prepare("DELETE FROM sqlite_sequence WHERE name = 'tokens'").run();
      db.pragma(`user_version = ${SCHEMA_VERSION}`);
      return { converted: 0, done: true };
    });
    const out = retryBusy(() => run.immediate());
    // The old tables' pages back to the file system (one atomic rewrite of the file).
    if (out.done) db.exec('VACUUM');
    return out;
  }
}
