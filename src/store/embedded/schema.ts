/**
 * The embedded store's schema: the tables of every port.
 * A new file gets format 6 at open, in one IMMEDIATE transaction. A file of an older format is
 * never changed by a service start: it is StoreFormatError, naming `tokenproxy
 * migrate`, which opens it `forMigration` and converts it (migrate.ts). The steps up to 5 are
 * DDL only (columns, tables) and run at the start of that conversion; 5 -> 6 rewrites every token.
 */
import type Database from 'better-sqlite3';
import { StoreFormatError } from '../types.js';
import { FORMAT_VERSION, SCHEMA_V6 } from './format.js';
import { MIGRATE_IDEMPOTENCY } from './idempotency-writes.js';
import { REACTOR_RESULTS_TABLE } from './reactor-results-writes.js';
import { retryBusy } from './writer.js';

export const SCHEMA_VERSION = FORMAT_VERSION;
/** The last format of the JSON records, which `tokenproxy migrate` converts from. */
export const LEGACY_VERSION = 5;
/** Version 1: the tables. */
const SCHEMA_V1 = `
CREATE TABLE IF NOT EXISTS tokens (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant_id TEXT NOT NULL, id TEXT NOT NULL, type TEXT NOT NULL, container TEXT NOT NULL,
  fingerprint TEXT, expires_ms INTEGER, cvc_sealed TEXT, cvc_expires_ms INTEGER,
  record TEXT NOT NULL,
  UNIQUE (tenant_id, id)
);
CREATE INDEX IF NOT EXISTS tokens_by_tenant ON tokens (tenant_id, seq);
CREATE INDEX IF NOT EXISTS tokens_by_type ON tokens (tenant_id, type, seq);
CREATE INDEX IF NOT EXISTS tokens_by_fingerprint ON tokens (tenant_id, fingerprint, seq) WHERE fingerprint IS NOT NULL;
CREATE INDEX IF NOT EXISTS tokens_cvc_due ON tokens (cvc_expires_ms) WHERE cvc_sealed IS NOT NULL;
CREATE TABLE IF NOT EXISTS token_index_hashes (
  tenant_id TEXT NOT NULL, hash TEXT NOT NULL,
  seq INTEGER NOT NULL REFERENCES tokens (seq) ON DELETE CASCADE,
  PRIMARY KEY (tenant_id, hash, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS token_index_hashes_by_seq ON token_index_hashes (seq);
CREATE TABLE IF NOT EXISTS token_metadata (
  tenant_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
  seq INTEGER NOT NULL REFERENCES tokens (seq) ON DELETE CASCADE,
  PRIMARY KEY (tenant_id, key, value, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS token_metadata_by_seq ON token_metadata (seq);
CREATE TABLE IF NOT EXISTS data_keys (
  ord INTEGER PRIMARY KEY AUTOINCREMENT,
  kid TEXT NOT NULL UNIQUE, wrapped TEXT NOT NULL, created_at TEXT NOT NULL
);`;

/**
 * Version 2: deduplication is a constraint. A deduplicating insert that finds no live token of
 * its tenant, type, container and fingerprint writes its token with dedupe_key set to those three,
 * and the unique index allows one such token per tenant and key. Existing rows get NULL (no slot):
 * the migration adds a column and an index over NULLs, so it cannot fail on the data of a
 * version 1 file, duplicates included (a later deduplicating insert returns the oldest of them).
 */
const MIGRATE_V2 = `
ALTER TABLE tokens ADD COLUMN dedupe_key TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS tokens_dedupe ON tokens (tenant_id, dedupe_key) WHERE dedupe_key IS NOT NULL;`;

/**
 * Version 4 (version 3 added the idempotency table, embedded/idempotency-writes.ts): the audit trail (store/audit.ts). `seq` is the event's place in its tenant's chain;
 * `event` the event as JSON (what the chain hashes is rebuilt from it); audit_heads holds each
 * tenant's last seq and hash, moved in the same transaction as the events.
 */
const MIGRATE_V4 = `
CREATE TABLE IF NOT EXISTS audit_events (
  tenant_id TEXT NOT NULL, seq INTEGER NOT NULL, created_ms INTEGER NOT NULL, event TEXT NOT NULL,
  PRIMARY KEY (tenant_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS audit_heads (tenant_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL) WITHOUT ROWID;`;

/**
 * Version 5: each head's anchor (crypto/audit-anchor.ts). Heads written before it have none
 * (NULL) until `tokenproxy migrate` anchors them (audit/anchor-heads.ts); appends refuse them until then.
 */
const MIGRATE_V5 = 'ALTER TABLE audit_heads ADD COLUMN anchor TEXT;';

/** The tables every format since 5 shares (data keys, idempotency entries, the audit trail). */
const SHARED = `
CREATE TABLE IF NOT EXISTS data_keys (
  ord INTEGER PRIMARY KEY AUTOINCREMENT,
  kid TEXT NOT NULL UNIQUE, wrapped TEXT NOT NULL, created_at TEXT NOT NULL
);
${MIGRATE_IDEMPOTENCY}
CREATE TABLE IF NOT EXISTS audit_events (
  tenant_id TEXT NOT NULL, seq INTEGER NOT NULL, created_ms INTEGER NOT NULL, event TEXT NOT NULL,
  PRIMARY KEY (tenant_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS audit_heads (tenant_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL, anchor TEXT) WITHOUT ROWID;`;

/**
 * The store marker (marker.ts): a table without a format change, created when a file of the
 * current format is opened by a service (as the reactor results' table is).
 */
export const STORE_MARKER_TABLE = `
CREATE TABLE IF NOT EXISTS store_marker (
  one INTEGER PRIMARY KEY CHECK (one = 1), id TEXT NOT NULL, created_at TEXT NOT NULL, lost_at TEXT
);`;

export function schemaVersion(db: Database.Database): number {
  return Number(db.pragma('user_version', { simple: true }));
}

/**
 * Creates the schema of a new file, or checks the format of an existing one, and returns the
 * version the file holds. The version is read inside the transaction: two processes opening one
 * new file create it once. `forMigration`: an older format is returned as it is, for migrate.ts.
 */
export function openSchema(db: Database.Database, opts: { forMigration?: boolean } = {}): number {
  const run = db.transaction((): number => {
    const version = schemaVersion(db);
    if (version > SCHEMA_VERSION) throw new Error(`the database schema (version ${version}) is newer than this tokenproxy understands (${SCHEMA_VERSION})`);
    // a table added without a format change (reactor-results-writes.ts), at a service
    // start only (a `migrate`, a dry run included, changes nothing it does not say); a no-op once there.
    if (version === SCHEMA_VERSION) {
      if (!opts.forMigration) db.exec(REACTOR_RESULTS_TABLE + STORE_MARKER_TABLE);
      return version;
    }
    if (version === 0) {
      db.exec(SHARED + SCHEMA_V6 + REACTOR_RESULTS_TABLE + STORE_MARKER_TABLE);
      db.pragma(`user_version = ${SCHEMA_VERSION}`);
      return SCHEMA_VERSION;
    }
    if (opts.forMigration) {
      // Formats 1 to 4: their DDL-only steps to 5 now, so every port opens; 5 -> 6 is migrate.ts's.
      if (version < LEGACY_VERSION) upgradeToLegacy(db);
      return LEGACY_VERSION;
    }
    throw new StoreFormatError(
      version, SCHEMA_VERSION,
      'run `tokenproxy migrate` with the service stopped to convert the embedded store (docs/operations.md, "Upgrading"); nothing was changed',
    );
  });
  return retryBusy(() => run.immediate());
}

/**
 * Brings a file of format 1 to 4 to format 5 (DDL only: columns and tables, the data untouched),
 * inside the caller's transaction: the first step of the conversion to format 6.
 */
export function upgradeToLegacy(db: Database.Database): void {
  const version = schemaVersion(db);
  if (version >= LEGACY_VERSION) return;
  db.exec(SCHEMA_V1);
  if (version < 2) db.exec(MIGRATE_V2);
  if (version < 3) db.exec(MIGRATE_IDEMPOTENCY);
  if (version < 4) db.exec(MIGRATE_V4);
  if (version < 5) db.exec(MIGRATE_V5);
  db.pragma(`user_version = ${LEGACY_VERSION}`);
}
