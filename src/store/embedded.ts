/**
 * The embedded token store: one SQLite file (better-sqlite3), for a single instance.
 *
 * Durability: WAL with synchronous=FULL fsyncs the WAL at every commit, so an insert that has
 * resolved survives kill -9 and power loss (https://www.sqlite.org/pragma.html#pragma_synchronous).
 * Columns hold what is filtered on; the record itself is JSON, the cvc a separate column so
 * purgeCvc can clear it without rewriting the record. Side tables index search hashes and
 * metadata pairs so a search is an index lookup, not a scan.
 */
import Database from 'better-sqlite3';
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Page, PageResult, StoredToken, TokenFilter, TokenStore, WrappedDataKey } from './types.js';
import { DuplicateTokenError, StoreUnavailableError } from './types.js';

const SCHEMA_VERSION = 1;
const SCHEMA = `
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

const LIVE = '(expires_ms IS NULL OR expires_ms > @now)';
const COLUMNS = 'seq, record, cvc_sealed, cvc_expires_ms';

interface Row {
  seq: number;
  record: string;
  cvc_sealed: string | null;
  cvc_expires_ms: number | null;
}

type Params = Record<string, string | number | null>;

interface PendingInsert {
  rows: { record: StoredToken; params: Params }[];
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** Optional list conditions; a statement is prepared once per combination present. */
const LIST_CONDITIONS: ReadonlyArray<[keyof TokenFilter | 'after', string]> = [
  ['after', 'seq < @after'],
  ['type', 'type = @type'],
  ['container', 'substr(container, 1, length(@container)) = @container'],
  ['fingerprint', 'fingerprint = @fingerprint'],
  [
    'metadata',
    `seq IN (SELECT m.seq FROM token_metadata m JOIN json_each(@metadata) j ON m.key = j.key AND m.value = j.value
      WHERE m.tenant_id = @tenant GROUP BY m.seq HAVING count(*) = @metadata_count)`,
  ],
  [
    'index_hashes',
    `seq IN (SELECT h.seq FROM token_index_hashes h WHERE h.tenant_id = @tenant
      AND h.hash IN (SELECT value FROM json_each(@hashes)) GROUP BY h.seq HAVING count(*) = @hashes_count)`,
  ],
  ['ids', 'id IN (SELECT value FROM json_each(@ids))'],
];

function sqliteCode(err: unknown): string | null {
  return err instanceof Database.SqliteError ? err.code : null;
}

function prepareStatements(db: Database.Database) {
  return {
    insert: db.prepare<[Params]>(
      `INSERT INTO tokens (tenant_id, id, type, container, fingerprint, expires_ms, cvc_sealed, cvc_expires_ms, record)
       VALUES (@tenant, @id, @type, @container, @fingerprint, @expires_ms, @cvc_sealed, @cvc_expires_ms, @record)`,
    ),
    insertHash: db.prepare<[string, string, number | bigint]>('INSERT OR IGNORE INTO token_index_hashes (tenant_id, hash, seq) VALUES (?, ?, ?)'),
    insertMeta: db.prepare<[string, string, string, number | bigint]>('INSERT OR IGNORE INTO token_metadata (tenant_id, key, value, seq) VALUES (?, ?, ?, ?)'),
    deleteHashes: db.prepare<[number]>('DELETE FROM token_index_hashes WHERE seq = ?'),
    deleteMeta: db.prepare<[number]>('DELETE FROM token_metadata WHERE seq = ?'),
    get: db.prepare<[Params], Row>(`SELECT ${COLUMNS} FROM tokens WHERE tenant_id = @tenant AND id = @id AND ${LIVE}`),
    getMany: db.prepare<[Params], Row & { id: string }>(
      `SELECT id, ${COLUMNS} FROM tokens WHERE tenant_id = @tenant AND id IN (SELECT value FROM json_each(@ids)) AND ${LIVE}`,
    ),
    byFingerprint: db.prepare<[Params], Row>(
      `SELECT ${COLUMNS} FROM tokens WHERE tenant_id = @tenant AND fingerprint = @fingerprint AND type = @type AND ${LIVE} ORDER BY seq LIMIT 1`,
    ),
    liveSeq: db.prepare<[Params], { seq: number }>(`SELECT seq FROM tokens WHERE tenant_id = @tenant AND id = @id AND ${LIVE}`),
    update: db.prepare<[Params]>(
      `UPDATE tokens SET type = @type, container = @container, fingerprint = @fingerprint, expires_ms = @expires_ms,
       cvc_sealed = @cvc_sealed, cvc_expires_ms = @cvc_expires_ms, record = @record WHERE seq = @seq`,
    ),
    delete: db.prepare<[string, string], { expires_ms: number | null }>('DELETE FROM tokens WHERE tenant_id = ? AND id = ? RETURNING expires_ms'),
    purgeCvc: db.prepare<[number]>('UPDATE tokens SET cvc_sealed = NULL WHERE cvc_sealed IS NOT NULL AND cvc_expires_ms <= ?'),
    listKeys: db.prepare<[], { kid: string; wrapped: string; created_at: string }>('SELECT kid, wrapped, created_at FROM data_keys ORDER BY ord'),
    addKey: db.prepare<[string, string, string]>('INSERT OR IGNORE INTO data_keys (kid, wrapped, created_at) VALUES (?, ?, ?)'),
    ping: db.prepare('SELECT 1'),
  };
}

export class EmbeddedStore implements TokenStore {
  readonly kind = 'embedded' as const;
  readonly #db: Database.Database;
  readonly #listStatements = new Map<number, Database.Statement<[Params], Row>>();
  readonly #s: ReturnType<typeof prepareStatements>;
  readonly #insertTx: (rows: { record: StoredToken; params: Params }[]) => void;
  readonly #groupTx: (batches: readonly PendingInsert[], failures: (Error | null)[]) => void;
  /** Inserts waiting for the next group commit (see insertMany). */
  #pending: PendingInsert[] = [];
  #flushScheduled = false;
  readonly #updateTx: (record: StoredToken, params: Params) => boolean;
  readonly #addKeyTx: (key: WrappedDataKey) => WrappedDataKey[];

  /** Opens (creating if needed) the database at `path`, or ':memory:'. */
  constructor(readonly path: string) {
    try {
      if (path !== ':memory:') {
        mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
        // Created 0600 before SQLite opens it; SQLite gives -wal/-shm the same mode.
        closeSync(openSync(path, 'a', 0o600));
      }
      this.#db = new Database(path);
      this.#db.pragma('journal_mode = WAL');
      this.#db.pragma('synchronous = FULL');
      this.#db.pragma('busy_timeout = 5000');
      this.#db.pragma('foreign_keys = ON');
      const version = Number(this.#db.pragma('user_version', { simple: true }));
      if (version > SCHEMA_VERSION) throw new Error(`the database schema (version ${version}) is newer than this tokenproxy understands`);
      this.#db.exec(SCHEMA);
      this.#db.pragma(`user_version = ${SCHEMA_VERSION}`);
    } catch (err) {
      const reason = err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : String(err instanceof Error ? err.message : err);
      throw new StoreUnavailableError(`cannot open the embedded store ${path}: ${reason}`, { cause: err });
    }
    const s = (this.#s = prepareStatements(this.#db));
    // Transactions (BEGIN … COMMIT, ROLLBACK when the function throws), built once like the statements.
    this.#insertTx = this.#db.transaction((rows: { record: StoredToken; params: Params }[]) => {
      for (const { record, params } of rows) {
        let seq: number | bigint;
        try {
          seq = s.insert.run(params).lastInsertRowid;
        } catch (err) {
          const code = sqliteCode(err);
          if (code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY') throw new DuplicateTokenError(record.id);
          throw err;
        }
        this.#writeSide(record, seq);
      }
    });
    // One transaction (one WAL fsync) for every insert that arrived since the last commit; each
    // insert runs in a savepoint of its own (better-sqlite3 nests transactions as savepoints), so
    // a duplicate id fails that request's batch alone and the others commit.
    this.#groupTx = this.#db.transaction((batches: readonly PendingInsert[], failures: (Error | null)[]) => {
      for (const b of batches) {
        try {
          this.#insertTx(b.rows);
          failures.push(null);
        } catch (err) {
          if (!(err instanceof DuplicateTokenError)) throw err;
          failures.push(err);
        }
      }
    });
    this.#updateTx = this.#db.transaction((record: StoredToken, params: Params) => {
      const live = s.liveSeq.get({ tenant: record.tenant_id, id: record.id, now: Date.now() });
      if (!live) return false;
      s.update.run({ ...params, seq: live.seq });
      s.deleteHashes.run(live.seq);
      s.deleteMeta.run(live.seq);
      this.#writeSide(record, live.seq);
      return true;
    });
    this.#addKeyTx = this.#db.transaction((key: WrappedDataKey) => {
      s.addKey.run(key.kid, key.wrapped, key.created_at);
      return s.listKeys.all().map((r) => decodeDataKey(r));
    });
  }

  /**
   * Group commit: inserts that arrive within one turn of the event loop are written in one
   * transaction with one fsync, and each promise resolves only after that commit (so the
   * durability promise is unchanged: a resolved insert survives kill -9). Under concurrent load
   * this turns one fsync per request into one per turn; a lone insert waits only for setImmediate.
   */
  insertMany(records: StoredToken[]): Promise<void> {
    let rows: { record: StoredToken; params: Params }[];
    try {
      rows = records.map((record) => ({ record, params: this.#params(record) }));
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise<void>((resolve, reject) => {
      this.#pending.push({ rows, resolve, reject });
      if (!this.#flushScheduled) {
        this.#flushScheduled = true;
        setImmediate(() => this.#flush());
      }
    });
  }

  #flush(): void {
    this.#flushScheduled = false;
    const batches = this.#pending;
    this.#pending = [];
    if (batches.length === 0) return;
    const failures: (Error | null)[] = [];
    try {
      this.#run(() => this.#groupTx(batches, failures));
    } catch (err) {
      for (const b of batches) b.reject(err);
      return;
    }
    batches.forEach((b, i) => (failures[i] ? b.reject(failures[i]) : b.resolve()));
  }

  async get(tenantId: string, id: string): Promise<StoredToken | null> {
    const now = Date.now();
    const row = this.#run(() => this.#s.get.get({ tenant: tenantId, id, now }));
    return row ? this.#decode(row, now) : null;
  }

  async getMany(tenantId: string, ids: string[]): Promise<StoredToken[]> {
    if (ids.length === 0) return [];
    const now = Date.now();
    const rows = this.#run(() => this.#s.getMany.all({ tenant: tenantId, ids: JSON.stringify(ids), now }));
    const byId = new Map(rows.map((r) => [r.id, r]));
    const out: StoredToken[] = [];
    for (const id of new Set(ids)) {
      const row = byId.get(id);
      if (row) out.push(this.#decode(row, now));
    }
    return out;
  }

  async update(record: StoredToken): Promise<boolean> {
    const params = this.#params(record);
    return this.#run(() => this.#updateTx(record, params));
  }

  /** Removes the record; true only when it was live (an expired token counts as missing). */
  async delete(tenantId: string, id: string): Promise<boolean> {
    const row = this.#run(() => this.#s.delete.get(tenantId, id));
    return row !== undefined && (row.expires_ms === null || row.expires_ms > Date.now());
  }

  async findByFingerprint(tenantId: string, type: string, fingerprint: string): Promise<StoredToken | null> {
    const now = Date.now();
    const row = this.#run(() => this.#s.byFingerprint.get({ tenant: tenantId, type, fingerprint, now }));
    return row ? this.#decode(row, now) : null;
  }

  async list(tenantId: string, filter: TokenFilter, page: Page): Promise<PageResult> {
    checkPage(page);
    if (filter.ids && filter.ids.length === 0) return { items: [], next: null };
    const now = Date.now();
    const params: Params = { tenant: tenantId, now, limit: page.size + 1 };
    const present = new Set<string>();
    const set = (name: string, values: Params): void => {
      present.add(name);
      Object.assign(params, values);
    };
    if (page.after !== null) set('after', { after: decodeCursor(page.after) });
    if (filter.type !== undefined) set('type', { type: filter.type });
    if (filter.container !== undefined) set('container', { container: filter.container });
    if (filter.fingerprint !== undefined) set('fingerprint', { fingerprint: filter.fingerprint });
    const pairs = Object.keys(filter.metadata ?? {}).length;
    if (pairs > 0) set('metadata', { metadata: JSON.stringify(filter.metadata), metadata_count: pairs });
    const hashes = [...new Set(filter.index_hashes ?? [])];
    if (hashes.length > 0) set('index_hashes', { hashes: JSON.stringify(hashes), hashes_count: hashes.length });
    if (filter.ids) set('ids', { ids: JSON.stringify(filter.ids) });
    const rows = this.#run(() => this.#listStatement(present).all(params));
    const items = rows.slice(0, page.size).map((r) => this.#decode(r, now));
    const next = rows.length > page.size ? encodeCursor(rows[page.size - 1].seq) : null;
    return { items, next };
  }

  async purgeCvc(now: Date): Promise<number> {
    const ms = now.getTime();
    if (!Number.isFinite(ms)) throw new TypeError('purgeCvc: invalid date');
    return this.#run(() => this.#s.purgeCvc.run(ms).changes);
  }

  async listDataKeys(): Promise<WrappedDataKey[]> {
    return this.#run(() => this.#s.listKeys.all().map((r) => decodeDataKey(r)));
  }

  async addDataKey(key: WrappedDataKey): Promise<WrappedDataKey[]> {
    return this.#run(() => this.#addKeyTx(key));
  }

  async ping(): Promise<void> {
    this.#run(() => this.#s.ping.get());
  }

  async close(): Promise<void> {
    // Inserts already accepted are committed (or rejected) before the database closes.
    this.#flush();
    if (this.#db.open) this.#db.close();
  }

  #listStatement(present: Set<string>): Database.Statement<[Params], Row> {
    let mask = 0;
    LIST_CONDITIONS.forEach(([name], i) => {
      if (present.has(name)) mask |= 1 << i;
    });
    let stmt = this.#listStatements.get(mask);
    if (!stmt) {
      const where = ['tenant_id = @tenant', LIVE, ...LIST_CONDITIONS.filter(([name]) => present.has(name)).map(([, sql]) => sql)];
      stmt = this.#db.prepare<[Params], Row>(`SELECT ${COLUMNS} FROM tokens WHERE ${where.join(' AND ')} ORDER BY seq DESC LIMIT @limit`);
      this.#listStatements.set(mask, stmt);
    }
    return stmt;
  }

  #params(r: StoredToken): Params {
    return {
      tenant: r.tenant_id,
      id: r.id,
      type: r.type,
      container: r.container,
      fingerprint: r.fingerprint,
      expires_ms: timeMs(r.expires_at, 'expires_at'),
      cvc_sealed: r.cvc_sealed,
      cvc_expires_ms: timeMs(r.cvc_expires_at, 'cvc_expires_at'),
      record: encodeRecord(r),
    };
  }

  #writeSide(r: StoredToken, seq: number | bigint): void {
    for (const hash of r.index_hashes) this.#s.insertHash.run(r.tenant_id, hash, seq);
    for (const [key, value] of Object.entries(r.metadata)) this.#s.insertMeta.run(r.tenant_id, key, value, seq);
  }

  #decode(row: Row, now: number): StoredToken {
    return decodeRecord(row.record, cvcVisible(row.cvc_expires_ms, now) ? row.cvc_sealed : null);
  }

  /** Runs a synchronous database call, turning I/O failures into StoreUnavailableError. */
  #run<T>(fn: () => T): T {
    if (!this.#db.open) throw new StoreUnavailableError('the embedded store is closed');
    try {
      return fn();
    } catch (err) {
      if (err instanceof DuplicateTokenError || err instanceof InvalidCursorError || err instanceof StoreUnavailableError) throw err;
      const code = sqliteCode(err);
      if (code) throw new StoreUnavailableError(`the embedded store failed (${code})`, { cause: err });
      throw err;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Shared by both stores (RedisStore imports these): cursors, page checks, the record codec.
// ---------------------------------------------------------------------------------------------

/** A cursor that does not decode: the API answers 400 invalid_cursor. */
export class InvalidCursorError extends Error {
  constructor() {
    super('invalid pagination cursor');
    this.name = 'InvalidCursorError';
  }
}

/** Cursors are opaque to clients: base64url of the last returned item's sequence number. */
export function encodeCursor(seq: number): string {
  return Buffer.from(`s${seq}`, 'latin1').toString('base64url');
}

export function decodeCursor(cursor: string): number {
  if (!/^[A-Za-z0-9_-]{1,32}$/.test(cursor)) throw new InvalidCursorError();
  const m = /^s([1-9][0-9]{0,15})$/.exec(Buffer.from(cursor, 'base64url').toString('latin1'));
  const seq = m ? Number(m[1]) : NaN;
  // Canonical form only: a cursor that decodes but is not what encodeCursor writes is rejected.
  if (!Number.isSafeInteger(seq) || encodeCursor(seq) !== cursor) throw new InvalidCursorError();
  return seq;
}

export function checkPage(page: Page): void {
  if (!Number.isInteger(page.size) || page.size < 1 || page.size > 100) {
    throw new RangeError('page size must be an integer from 1 to 100');
  }
}

/** ISO 8601 → epoch ms (null stays null); the vault validated it, this refuses garbage anyway. */
export function timeMs(iso: string | null, field: string): number | null {
  if (iso === null) return null;
  const ms = Date.parse(iso);
  if (!Number.isFinite(ms)) throw new TypeError(`${field} is not a valid ISO 8601 date`);
  return ms;
}

export function isLive(expiresMs: number | null, now: number): boolean {
  return expiresMs === null || expiresMs > now;
}

/** A cvc past cvc_expires_at is never returned, whether or not purgeCvc has run yet. */
export const cvcVisible = isLive;

/** The record as stored: every field but cvc_sealed (kept apart so it can be purged alone). */
export function encodeRecord(r: StoredToken): string {
  return JSON.stringify({
    tenant_id: r.tenant_id, id: r.id, type: r.type, container: r.container, sealed: r.sealed,
    cvc_expires_at: r.cvc_expires_at, metadata: r.metadata, search_indexes: r.search_indexes,
    index_hashes: r.index_hashes, fingerprint: r.fingerprint, fingerprint_expression: r.fingerprint_expression,
    mask: r.mask, created_by: r.created_by, created_at: r.created_at, modified_by: r.modified_by,
    modified_at: r.modified_at, expires_at: r.expires_at,
  });
}

const isStr = (v: unknown): v is string => typeof v === 'string';
const isStrOrNull = (v: unknown): v is string | null => v === null || typeof v === 'string';
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isStrArray = (v: unknown): v is string[] => Array.isArray(v) && v.every(isStr);
const isStrMap = (v: unknown): v is Record<string, string> => isObject(v) && Object.values(v).every(isStr);

function corrupt(what: string): StoreUnavailableError {
  return new StoreUnavailableError(`a stored ${what} is corrupt`);
}

export function decodeRecord(json: string, cvcSealed: string | null): StoredToken {
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch {
    throw corrupt('token record');
  }
  if (!isObject(v)) throw corrupt('token record');
  const { tenant_id, id, type, container, sealed, cvc_expires_at, metadata, search_indexes, index_hashes } = v;
  const { fingerprint, fingerprint_expression, mask, created_by, created_at, modified_by, modified_at, expires_at } = v;
  if (
    !isStr(tenant_id) || !isStr(id) || !isStr(type) || !isStr(container) || !isStr(sealed) || !isStrOrNull(cvc_expires_at) ||
    !isStrMap(metadata) || !isStrArray(search_indexes) || !isStrArray(index_hashes) || !isStrOrNull(fingerprint) ||
    !isStrOrNull(fingerprint_expression) || !isStrOrNull(mask) || !isStr(created_by) || !isStr(created_at) ||
    !isStrOrNull(modified_by) || !isStrOrNull(modified_at) || !isStrOrNull(expires_at)
  ) {
    throw corrupt('token record');
  }
  return {
    tenant_id, id, type, container, sealed, cvc_sealed: cvcSealed, cvc_expires_at, metadata, search_indexes,
    index_hashes, fingerprint, fingerprint_expression, mask, created_by, created_at, modified_by, modified_at, expires_at,
  };
}

export function decodeDataKey(v: unknown): WrappedDataKey {
  if (!isObject(v) || !isStr(v.kid) || !isStr(v.wrapped) || !isStr(v.created_at)) throw corrupt('data key');
  return { kid: v.kid, wrapped: v.wrapped, created_at: v.created_at };
}
