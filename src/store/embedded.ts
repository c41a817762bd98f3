/**
 * The embedded token store: one SQLite file (better-sqlite3), for a single instance.
 *
 * Durability: WAL with synchronous=FULL fsyncs the WAL at every commit, so a write that has
 * resolved survives kill -9 and power loss (https://www.sqlite.org/pragma.html#pragma_synchronous).
 * Columns hold what is filtered on; the record itself is JSON, the cvc a separate column so
 * purgeCvc can clear it without rewriting the record. Side tables index search hashes and
 * metadata pairs so a search is an index lookup, not a scan.
 *
 * Threads: every write runs on a worker thread (embedded-writer.ts) with a second connection to
 * the same file, so the commit and its fsync (about a quarter of the tokenizing proxy's main
 * thread, and a stall of the event loop while the disk syncs) happen off the main thread. Reads
 * stay on the main thread's connection: WAL lets them run while the writer commits, and a write
 * resolves only after the writer's COMMIT returned, so the next read sees it. A ':memory:'
 * database cannot be shared with another thread: there the same write code runs in-thread.
 */
import Database from 'better-sqlite3';
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { checkPage, cvcVisible, decodeCursor, decodeDataKey, decodeRecord, encodeCursor, encodeRecord, InvalidCursorError, timeMs } from './codec.js';
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

/** One record as the writer needs it (structured-cloned to the writer thread). */
export interface WriteRow {
  tenant_id: string;
  id: string;
  index_hashes: string[];
  metadata: Record<string, string>;
  params: Params;
}

export type WriteOp =
  | { op: 'insert'; rows: WriteRow[] }
  | { op: 'update'; row: WriteRow }
  | { op: 'delete'; tenant_id: string; id: string }
  | { op: 'purgeCvc'; now: number }
  | { op: 'addKey'; key: WrappedDataKey };

export type WriteResult = { ok: true; value: unknown } | { ok: false; error: unknown };

/** A write failure as it crosses the thread boundary: no message, no values, only what it was. */
export type ErrorDescriptor = { kind: 'duplicate'; id: string } | { kind: 'sqlite'; code: string } | { kind: 'other' };

/** Main thread → writer: the writes of one event-loop turn; `close` after the last. */
export interface WriterRequest {
  ops: { id: number; op: WriteOp }[];
  close?: boolean;
}

/** Writer → main thread: one answer per op, sent after their transaction committed (or failed). */
export interface WriterReply {
  results: { id: number; ok: boolean; value?: unknown; error?: ErrorDescriptor }[];
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

export function describeError(err: unknown): ErrorDescriptor {
  if (err instanceof DuplicateTokenError) return { kind: 'duplicate', id: err.id };
  const code = sqliteCode(err);
  return code ? { kind: 'sqlite', code } : { kind: 'other' };
}

/** The error a caller sees for a failed write (`cause` only when it happened in this thread). */
function writeError(d: ErrorDescriptor, cause?: unknown): Error {
  if (d.kind === 'duplicate') return new DuplicateTokenError(d.id);
  const options = cause === undefined ? undefined : { cause };
  if (d.kind === 'sqlite') return new StoreUnavailableError(`the embedded store failed (${d.code})`, options);
  return new StoreUnavailableError('the embedded store failed', options);
}

/** A connection with the settings every connection needs (they are per connection, except WAL). */
export function openConnection(path: string): Database.Database {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.pragma('busy_timeout = 5000');
  db.pragma('foreign_keys = ON');
  return db;
}

function prepareReads(db: Database.Database) {
  return {
    get: db.prepare<[Params], Row>(`SELECT ${COLUMNS} FROM tokens WHERE tenant_id = @tenant AND id = @id AND ${LIVE}`),
    getMany: db.prepare<[Params], Row & { id: string }>(
      `SELECT id, ${COLUMNS} FROM tokens WHERE tenant_id = @tenant AND id IN (SELECT value FROM json_each(@ids)) AND ${LIVE}`,
    ),
    byFingerprint: db.prepare<[Params], Row>(
      `SELECT ${COLUMNS} FROM tokens WHERE tenant_id = @tenant AND fingerprint = @fingerprint AND type = @type AND ${LIVE} ORDER BY seq LIMIT 1`,
    ),
    listKeys: db.prepare<[], { kid: string; wrapped: string; created_at: string }>('SELECT kid, wrapped, created_at FROM data_keys ORDER BY ord'),
    ping: db.prepare('SELECT 1'),
  };
}

/**
 * The write side, shared by the writer thread and the in-thread (':memory:') mode: a function that
 * runs a list of writes in ONE transaction (one WAL fsync), each write in a savepoint of its own
 * (better-sqlite3 nests transactions as savepoints), so a duplicate id fails that insertMany alone
 * and the others commit. Any other failure rolls the whole group back and fails every write in it.
 */
export function writeExecutor(db: Database.Database): (ops: readonly WriteOp[]) => WriteResult[] {
  const s = {
    insert: db.prepare<[Params]>(
      `INSERT INTO tokens (tenant_id, id, type, container, fingerprint, expires_ms, cvc_sealed, cvc_expires_ms, record)
       VALUES (@tenant, @id, @type, @container, @fingerprint, @expires_ms, @cvc_sealed, @cvc_expires_ms, @record)`,
    ),
    insertHash: db.prepare<[string, string, number | bigint]>('INSERT OR IGNORE INTO token_index_hashes (tenant_id, hash, seq) VALUES (?, ?, ?)'),
    insertMeta: db.prepare<[string, string, string, number | bigint]>('INSERT OR IGNORE INTO token_metadata (tenant_id, key, value, seq) VALUES (?, ?, ?, ?)'),
    deleteHashes: db.prepare<[number]>('DELETE FROM token_index_hashes WHERE seq = ?'),
    deleteMeta: db.prepare<[number]>('DELETE FROM token_metadata WHERE seq = ?'),
    liveSeq: db.prepare<[Params], { seq: number }>(`SELECT seq FROM tokens WHERE tenant_id = @tenant AND id = @id AND ${LIVE}`),
    update: db.prepare<[Params]>(
      `UPDATE tokens SET type = @type, container = @container, fingerprint = @fingerprint, expires_ms = @expires_ms,
       cvc_sealed = @cvc_sealed, cvc_expires_ms = @cvc_expires_ms, record = @record WHERE seq = @seq`,
    ),
    delete: db.prepare<[string, string], { expires_ms: number | null }>('DELETE FROM tokens WHERE tenant_id = ? AND id = ? RETURNING expires_ms'),
    purgeCvc: db.prepare<[number]>('UPDATE tokens SET cvc_sealed = NULL WHERE cvc_sealed IS NOT NULL AND cvc_expires_ms <= ?'),
    listKeys: db.prepare<[], { kid: string; wrapped: string; created_at: string }>('SELECT kid, wrapped, created_at FROM data_keys ORDER BY ord'),
    addKey: db.prepare<[string, string, string]>('INSERT OR IGNORE INTO data_keys (kid, wrapped, created_at) VALUES (?, ?, ?)'),
  };
  const writeSide = (r: WriteRow, seq: number | bigint): void => {
    for (const hash of r.index_hashes) s.insertHash.run(r.tenant_id, hash, seq);
    for (const [key, value] of Object.entries(r.metadata)) s.insertMeta.run(r.tenant_id, key, value, seq);
  };
  const one = db.transaction((w: WriteOp): unknown => {
    switch (w.op) {
      case 'insert':
        for (const r of w.rows) {
          let seq: number | bigint;
          try {
            seq = s.insert.run(r.params).lastInsertRowid;
          } catch (err) {
            const code = sqliteCode(err);
            if (code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY') throw new DuplicateTokenError(r.id);
            throw err;
          }
          writeSide(r, seq);
        }
        return undefined;
      case 'update': {
        const live = s.liveSeq.get({ tenant: w.row.tenant_id, id: w.row.id, now: Date.now() });
        if (!live) return false;
        s.update.run({ ...w.row.params, seq: live.seq });
        s.deleteHashes.run(live.seq);
        s.deleteMeta.run(live.seq);
        writeSide(w.row, live.seq);
        return true;
      }
      case 'delete': {
        // True only when it was live: an expired token counts as missing.
        const row = s.delete.get(w.tenant_id, w.id);
        return row !== undefined && (row.expires_ms === null || row.expires_ms > Date.now());
      }
      case 'purgeCvc':
        return s.purgeCvc.run(w.now).changes;
      case 'addKey':
        s.addKey.run(w.key.kid, w.key.wrapped, w.key.created_at);
        return s.listKeys.all();
    }
  });
  const group = db.transaction((ops: readonly WriteOp[], out: WriteResult[]) => {
    for (const w of ops) {
      try {
        out.push({ ok: true, value: one(w) });
      } catch (err) {
        if (!(err instanceof DuplicateTokenError)) throw err;
        out.push({ ok: false, error: err });
      }
    }
  });
  return (ops) => {
    const out: WriteResult[] = [];
    try {
      group(ops, out);
    } catch (err) {
      return ops.map(() => ({ ok: false, error: err }));
    }
    return out;
  };
}

/**
 * Starts embedded-writer.js next to this file, or embedded-writer.ts when running from source
 * under a TypeScript loader (tap's ts-node, tsx). The worker inherits process.execArgv, but on
 * Node 20 (and 22/24 before tsx 4.21's 22.22.3/24.11.1) tsx registers its hooks on the main
 * thread only (https://github.com/privatenumber/tsx/issues/354), so from source the worker starts
 * from a small bootstrap that registers tsx itself when its loader cannot load the .ts entry.
 */
function startWriter(dbPath: string): Worker {
  const workerData = { path: dbPath };
  const here = fileURLToPath(import.meta.url);
  if (!here.endsWith('.ts')) return new Worker(join(dirname(here), 'embedded-writer.js'), { workerData });
  const entry = new URL('./embedded-writer.ts', import.meta.url).href;
  let tsx: string | null = null;
  try {
    tsx = import.meta.resolve('tsx/esm/api');
  } catch {
    // no tsx: the inherited loader must handle .ts on its own
  }
  const bootstrap = `
    const entry = ${JSON.stringify(entry)}, tsx = ${JSON.stringify(tsx)};
    import(entry).catch(async (err) => {
      if (err?.code !== 'ERR_UNKNOWN_FILE_EXTENSION' || tsx === null) throw err;
      (await import(tsx)).register();
      await import(entry + '?tsx');
    });`;
  return new Worker(bootstrap, { eval: true, workerData });
}

interface Request {
  op: WriteOp;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

/**
 * One writer thread. It keeps the process alive only while a write is in flight (ref'd then,
 * unref'd when idle). When it dies, every write in flight rejects; the store starts a new one.
 */
class WriterThread {
  readonly #worker: Worker;
  readonly #inflight = new Map<number, Request>();
  #nextId = 1;
  #closing = false;
  #alive = true;
  readonly exited: Promise<void>;

  constructor(dbPath: string) {
    this.#worker = startWriter(dbPath);
    this.#worker.unref();
    this.#worker.on('message', (m: WriterReply) => this.#answer(m));
    // An uncaught error in the writer ('error') is always followed by 'exit', which rejects.
    this.#worker.on('error', () => {});
    this.exited = new Promise((resolve) => {
      this.#worker.once('exit', () => {
        this.#alive = false;
        const lost = [...this.#inflight.values()];
        this.#inflight.clear();
        for (const r of lost) r.reject(new StoreUnavailableError('the embedded store writer stopped'));
        resolve();
      });
    });
  }

  get alive(): boolean {
    return this.#alive;
  }

  get worker(): Worker {
    return this.#worker;
  }

  send(requests: readonly Request[], close = false): void {
    if (this.#inflight.size === 0 || close) this.#worker.ref();
    if (close) this.#closing = true;
    const ops = requests.map((r) => {
      const id = this.#nextId++;
      this.#inflight.set(id, r);
      return { id, op: r.op };
    });
    this.#worker.postMessage({ ops, close } satisfies WriterRequest);
  }

  #answer(m: WriterReply): void {
    for (const res of m.results) {
      const r = this.#inflight.get(res.id);
      if (!r) continue;
      this.#inflight.delete(res.id);
      if (res.ok) r.resolve(res.value);
      else r.reject(writeError(res.error ?? { kind: 'other' }));
    }
    if (this.#inflight.size === 0 && !this.#closing) this.#worker.unref();
  }
}

export class EmbeddedStore implements TokenStore {
  readonly kind = 'embedded' as const;
  readonly #db: Database.Database;
  readonly #listStatements = new Map<number, Database.Statement<[Params], Row>>();
  readonly #s: ReturnType<typeof prepareReads>;
  /** In-thread writes (':memory:' only); null when a writer thread does them. */
  readonly #execute: ((ops: readonly WriteOp[]) => WriteResult[]) | null = null;
  #writer: WriterThread | null = null;
  /** Writes waiting for the next group commit (see insertMany). */
  #queue: Request[] = [];
  #flushScheduled = false;
  #closed: Promise<void> | null = null;

  /** Opens (creating if needed) the database at `path`, or ':memory:'. */
  constructor(readonly path: string) {
    try {
      if (path !== ':memory:') {
        mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
        // Created 0600 before SQLite opens it; SQLite gives -wal/-shm the same mode.
        closeSync(openSync(path, 'a', 0o600));
      }
      this.#db = openConnection(path);
      const version = Number(this.#db.pragma('user_version', { simple: true }));
      if (version > SCHEMA_VERSION) throw new Error(`the database schema (version ${version}) is newer than this tokenproxy understands`);
      this.#db.exec(SCHEMA);
      this.#db.pragma(`user_version = ${SCHEMA_VERSION}`);
    } catch (err) {
      const reason = err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : String(err instanceof Error ? err.message : err);
      throw new StoreUnavailableError(`cannot open the embedded store ${path}: ${reason}`, { cause: err });
    }
    this.#s = prepareReads(this.#db);
    // The schema exists now; the writer opens its own connection to it.
    if (path === ':memory:') this.#execute = writeExecutor(this.#db);
    else this.#writer = new WriterThread(path);
  }

  /**
   * Group commit: inserts (and other writes) that arrive within one turn of the event loop go to
   * the writer in one message; the writer commits every message it has received by its next turn
   * in one transaction with one fsync, and each promise resolves only after that commit (so a
   * resolved insert survives kill -9). A lone insert waits only for two setImmediates.
   */
  insertMany(records: StoredToken[]): Promise<void> {
    let rows: WriteRow[];
    try {
      rows = records.map((r) => this.#row(r));
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#write({ op: 'insert', rows }, () => undefined);
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
    const row = this.#row(record);
    return this.#write({ op: 'update', row }, (v) => v === true);
  }

  /** Removes the record; true only when it was live (an expired token counts as missing). */
  async delete(tenantId: string, id: string): Promise<boolean> {
    return this.#write({ op: 'delete', tenant_id: tenantId, id }, (v) => v === true);
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
    return this.#write({ op: 'purgeCvc', now: ms }, (v) => (typeof v === 'number' ? v : 0));
  }

  async listDataKeys(): Promise<WrappedDataKey[]> {
    return this.#run(() => this.#s.listKeys.all().map((r) => decodeDataKey(r)));
  }

  async addDataKey(key: WrappedDataKey): Promise<WrappedDataKey[]> {
    const copy = { kid: key.kid, wrapped: key.wrapped, created_at: key.created_at };
    return this.#write({ op: 'addKey', key: copy }, (v) => (Array.isArray(v) ? v.map((r: unknown) => decodeDataKey(r)) : []));
  }

  async ping(): Promise<void> {
    this.#run(() => this.#s.ping.get());
  }

  /** Writes already accepted are committed (or rejected), the writer exits, then the database closes. */
  close(): Promise<void> {
    this.#closed ??= this.#shutdown();
    return this.#closed;
  }

  /** The writer thread, for tests that kill it; null in ':memory:' mode or when none is running. */
  writerThread(): Worker | null {
    return this.#writer?.alive ? this.#writer.worker : null;
  }

  async #shutdown(): Promise<void> {
    const requests = this.#take();
    if (this.#execute) this.#settle(requests, this.#execute(requests.map((r) => r.op)));
    else if (requests.length > 0 || this.#writer?.alive) {
      const writer = this.#liveWriter();
      writer.send(requests, true);
      await writer.exited;
    }
    this.#writer = null;
    if (this.#db.open) this.#db.close();
  }

  #write<T>(op: WriteOp, narrow: (value: unknown) => T): Promise<T> {
    if (this.#closed) return Promise.reject(new StoreUnavailableError('the embedded store is closed'));
    return new Promise<T>((resolve, reject) => {
      const settle = (v: unknown): void => {
        try {
          resolve(narrow(v));
        } catch (err) {
          reject(err); // a corrupt data key row
        }
      };
      this.#queue.push({ op, resolve: settle, reject });
      if (!this.#flushScheduled) {
        this.#flushScheduled = true;
        setImmediate(() => this.#flush());
      }
    });
  }

  #take(): Request[] {
    this.#flushScheduled = false;
    const requests = this.#queue;
    this.#queue = [];
    return requests;
  }

  #flush(): void {
    const requests = this.#take();
    if (requests.length === 0) return;
    if (this.#execute) {
      this.#settle(requests, this.#execute(requests.map((r) => r.op)));
      return;
    }
    let writer: WriterThread;
    try {
      writer = this.#liveWriter();
    } catch (err) {
      const failure = new StoreUnavailableError('the embedded store writer cannot start', { cause: err });
      for (const r of requests) r.reject(failure);
      return;
    }
    writer.send(requests);
  }

  /** The running writer, or a new one when it died (its writes in flight have been rejected). */
  #liveWriter(): WriterThread {
    if (!this.#writer?.alive) this.#writer = new WriterThread(this.path);
    return this.#writer;
  }

  #settle(requests: readonly Request[], results: readonly WriteResult[]): void {
    requests.forEach((r, i) => {
      const res = results[i];
      if (res.ok) r.resolve(res.value);
      else r.reject(writeError(describeError(res.error), res.error));
    });
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

  /** Encoded and validated here, so a bad date is a TypeError for this caller alone. */
  #row(r: StoredToken): WriteRow {
    const params: Params = {
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
    return { tenant_id: r.tenant_id, id: r.id, index_hashes: r.index_hashes, metadata: r.metadata, params };
  }

  #decode(row: Row, now: number): StoredToken {
    return decodeRecord(row.record, cvcVisible(row.cvc_expires_ms, now) ? row.cvc_sealed : null);
  }

  /** Runs a synchronous read, turning I/O failures into StoreUnavailableError. */
  #run<T>(fn: () => T): T {
    if (this.#closed || !this.#db.open) throw new StoreUnavailableError('the embedded store is closed');
    try {
      return fn();
    } catch (err) {
      if (err instanceof InvalidCursorError || err instanceof StoreUnavailableError) throw err;
      const code = sqliteCode(err);
      if (code) throw new StoreUnavailableError(`the embedded store failed (${code})`, { cause: err });
      throw err;
    }
  }
}
