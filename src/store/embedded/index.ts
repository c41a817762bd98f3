/**
 * The embedded token store: one SQLite file (better-sqlite3), for a single instance.
 *
 * Durability: WAL with synchronous=FULL fsyncs the WAL at every commit, so a write that has
 * resolved survives kill -9 and power loss (https://www.sqlite.org/pragma.html#pragma_synchronous).
 * Columns hold what is filtered on; the record itself is JSON, the cvc a separate column so
 * purgeCvc can clear it without rewriting the record. Side tables index search hashes and
 * metadata pairs so a search is an index lookup, not a scan.
 *
 * Threads: every write runs on a writer thread (embedded-writer.ts) with a second connection to
 * the same file, so the commit and its fsync (about a quarter of the tokenizing proxy's main
 * thread, and a stall of the event loop while the disk syncs) happen off the main thread. Reads
 * stay on this thread's connection: WAL lets them run while the writer commits, and a write
 * resolves only after the writer's COMMIT returned, so the next read sees it. A ':memory:'
 * database cannot be shared with another thread: there the same transactions run in this one.
 */
import type Database from 'better-sqlite3';
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Worker } from 'node:worker_threads';
import { checkPage, cvcVisible, decodeCursor, decodeDataKey, decodeRecord, encodeCursor, encodeRecord, InvalidCursorError, timeMs } from '../codec.js';
import type { InsertOptions, Page, PageResult, ScopeRule, StoredToken, TokenFilter, TokenPort, WrappedDataKey, AuditPort, DataKeyPort, Store } from '../types.js';
import { StoreUnavailableError } from '../types.js';
import { MIGRATE_IDEMPOTENCY, type ClaimRow } from './idempotency-writes.js';
import type { IdempotencyClaim, IdempotencyPort, IdempotencySlot } from '../idempotency.js';
import type { AuditAnchorSigner } from '../../crypto/audit-anchor.js';
import {
  chain, decodeEvent, TenantSerialAppender, type AuditEvent, type AuditEventInput, type AuditFilter, type AuditPageResult, type StoredAuditHead,
} from '../audit.js';
import {
  describeError, LIVE, openConnection, retryBusy, sqliteCode, writeError, writeExecutor, WriterThread,
  type Params, type StoredRow, type WriteOp, type WriteRequest, type WriteResult, type WriteRow,
} from './writer.js';
import { decodeOp, encodeOp, WireReader } from './wire.js';

const SCHEMA_VERSION = 5;
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

/** The deduplication slot of a record: its type, container and fingerprint (null without one). */
function dedupeKey(r: StoredToken): string | null {
  return r.fingerprint === null ? null : JSON.stringify([r.type, r.container, r.fingerprint]);
}

/**
 * Version 4 (version 3 added the idempotency table, store/embedded-idempotency.ts): the audit trail (store/audit.ts). `seq` is the event's place in its tenant's chain;
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
 * Version 5 (issue 23): each head's anchor (crypto/audit-anchor.ts). Heads written before it have none
 * (NULL) until the tenant's next append anchors the head it writes.
 */
const MIGRATE_V5 = 'ALTER TABLE audit_heads ADD COLUMN anchor TEXT;';

const COLUMNS = 'seq, record, cvc_sealed, cvc_expires_ms';

/** How often an audit append retries against a head another process moved. */
const CAS_ATTEMPTS = 100;

type Row = StoredRow;

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

function prepareReads(db: Database.Database) {
  return {
    get: db.prepare<[Params], Row>(`SELECT ${COLUMNS} FROM tokens WHERE tenant_id = @tenant AND id = @id AND ${LIVE}`),
    getMany: db.prepare<[Params], Row & { id: string }>(
      `SELECT id, ${COLUMNS} FROM tokens WHERE tenant_id = @tenant AND id IN (SELECT value FROM json_each(@ids)) AND ${LIVE}`,
    ),
    listKeys: db.prepare<[], { kid: string; wrapped: string; created_at: string }>('SELECT kid, wrapped, created_at FROM data_keys ORDER BY ord'),
    ping: db.prepare('SELECT 1'),
    auditList: db.prepare<[Params], { event: string; seq: number }>(
      `SELECT seq, event FROM audit_events WHERE tenant_id = @tenant AND seq < @after AND created_ms >= @start AND created_ms <= @end
       AND (@entity IS NULL OR EXISTS (SELECT 1 FROM json_each(event, '$.token_ids') j WHERE j.value = @entity))
       ORDER BY seq DESC LIMIT @limit`,
    ),
    auditRange: db.prepare<[string, number, number], { event: string; seq: number }>(
      'SELECT seq, event FROM audit_events WHERE tenant_id = ? AND seq > ? ORDER BY seq LIMIT ?',
    ),
    auditHead: db.prepare<[string], StoredAuditHead>('SELECT seq, hash, anchor FROM audit_heads WHERE tenant_id = ?'),
  };
}

export class EmbeddedStore implements Store, TokenPort, AuditPort, DataKeyPort, IdempotencyPort {
  readonly kind = 'embedded' as const;
  readonly tokens: TokenPort = this;
  readonly audit: AuditPort = this;
  readonly dataKeys: DataKeyPort = this;
  readonly idempotency: IdempotencyPort = this;
  readonly #db: Database.Database;
  readonly #listStatements = new Map<number, Database.Statement<[Params], Row>>();
  readonly #s: ReturnType<typeof prepareReads>;
  /** In-thread writes (':memory:' only); null when a writer thread does them. */
  readonly #execute: ((ops: readonly WriteOp[]) => WriteResult[]) | null = null;
  #writer: WriterThread | null = null;
  /** Writes waiting for the next group commit (see insertMany). */
  #queue: WriteRequest[] = [];
  #flushScheduled = false;
  #closed: Promise<void> | null = null;
  /** One compare-and-set append per tenant at a time from this process (store/audit.ts). */
  readonly #audit = new TenantSerialAppender((tenantId, inputs, sign) => this.#appendAudit(tenantId, inputs, sign));

  /** Opens (creating if needed) the database at `path`, or ':memory:'. */
  constructor(readonly path: string) {
    try {
      if (path !== ':memory:') {
        mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
        // Created 0600 before SQLite opens it; SQLite gives -wal/-shm the same mode.
        closeSync(openSync(path, 'a', 0o600));
      }
      this.#db = openConnection(path);
      // One IMMEDIATE transaction, the version read inside it: a migration that fails leaves the
      // file as it was, and two processes opening one file migrate it once.
      const migrate = this.#db.transaction(() => {
        const version = Number(this.#db.pragma('user_version', { simple: true }));
        if (version > SCHEMA_VERSION) throw new Error(`the database schema (version ${version}) is newer than this tokenproxy understands`);
        if (version === SCHEMA_VERSION) return;
        this.#db.exec(SCHEMA_V1);
        if (version < 2) this.#db.exec(MIGRATE_V2);
        if (version < 3) this.#db.exec(MIGRATE_IDEMPOTENCY);
        if (version < 4) this.#db.exec(MIGRATE_V4);
        if (version < 5) this.#db.exec(MIGRATE_V5);
        this.#db.pragma(`user_version = ${SCHEMA_VERSION}`);
      });
      retryBusy(() => migrate.immediate());
    } catch (err) {
      const reason = err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : String(err instanceof Error ? err.message : err);
      throw new StoreUnavailableError(`cannot open the embedded store ${path}: ${reason}`, { cause: err });
    }
    this.#s = prepareReads(this.#db);
    // The schema exists now; the writer opens its own connection to it.
    if (path === ':memory:') this.#execute = writeExecutor(this.#db);
    else this.#writer = new WriterThread(path, () => this.#writerIdle());
  }

  /**
   * Group commit: inserts (and other writes) that arrive within one turn of the event loop go to
   * the writer in one message; the writer commits every message it has received by its next turn
   * in one transaction with one fsync, and each promise resolves only after that commit (so a
   * resolved insert survives kill -9). A lone insert waits only for two setImmediates.
   */
  insertMany(records: StoredToken[], options: InsertOptions = {}): Promise<Array<StoredToken | null>> {
    let frame: string;
    try {
      const rows = records.map((r, i) => {
        const dedupe = options.dedupe?.[i] === true;
        const row = this.#row(r, dedupe);
        if (dedupe) row.dedupe = true;
        return row;
      });
      frame = encodeOp({ op: 'insert', rows });
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#writeFrame(frame, (v) => {
      const now = Date.now();
      return records.map((_, i) => {
        const hit = Array.isArray(v) ? (v[i] as Row | null | undefined) : null;
        return hit ? this.#decode(hit, now) : null;
      });
    });
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

  appendAudit(tenantId: string, events: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    if (events.length === 0) return Promise.resolve([]);
    return this.#audit.append(tenantId, events, sign);
  }

  /**
   * Chained and anchored here, on the main thread (the anchor's key never reaches the writer), from
   * the head this connection reads; the writer stores them only while that is still the head (in
   * workers mode another process may have appended meanwhile: then again from the new head).
   */
  async #appendAudit(tenantId: string, inputs: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const current = await this.auditHead(tenantId);
      const { events, head } = chain(current, inputs);
      const expect = current === null ? null : { seq: current.seq, hash: current.hash };
      const written = await this.#write({ op: 'audit', tenant_id: tenantId, expect, events, head: { ...head, anchor: sign(tenantId, head) } }, (v) => v === true);
      if (written) return events;
    }
    throw new StoreUnavailableError('the audit chain head kept moving; the append was not written');
  }

  async listAudit(tenantId: string, filter: AuditFilter, page: Page): Promise<AuditPageResult> {
    checkPage(page);
    const rows = this.#run(() => this.#s.auditList.all({
      tenant: tenantId, after: page.after === null ? Number.MAX_SAFE_INTEGER : decodeCursor(page.after),
      start: filter.start_ms ?? 0, end: filter.end_ms ?? Number.MAX_SAFE_INTEGER, entity: filter.entity_id ?? null, limit: page.size + 1,
    }));
    const items: AuditEvent[] = [];
    for (const r of rows.slice(0, page.size)) {
      const e = decodeEvent(r.event);
      if (e) items.push(e);
    }
    return { items, next: rows.length > page.size ? encodeCursor(rows[page.size - 1]!.seq) : null };
  }

  async auditRange(tenantId: string, after: string | null, limit: number): Promise<{ items: Array<AuditEvent | null>; next: string | null }> {
    const rows = this.#run(() => this.#s.auditRange.all(tenantId, after === null ? 0 : decodeCursor(after), limit));
    return { items: rows.map((r) => decodeEvent(r.event)), next: rows.length === limit ? encodeCursor(rows[rows.length - 1]!.seq) : null };
  }

  async auditHead(tenantId: string): Promise<StoredAuditHead | null> {
    return this.#run(() => this.#s.auditHead.get(tenantId)) ?? null;
  }

  async update(record: StoredToken): Promise<boolean> {
    const row = this.#row(record);
    return this.#write({ op: 'update', row }, (v) => v === true);
  }

  /** Removes the record; true only when it was live (an expired token counts as missing). */
  async delete(tenantId: string, id: string): Promise<boolean> {
    return this.#write({ op: 'delete', tenant_id: tenantId, id }, (v) => v === true);
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
    const scope = filter.scope;
    if (scope !== undefined) {
      if (!scope.some((r) => r.allow)) return { items: [], next: null };
      scope.forEach((r, i) => Object.assign(params, { [`sp${i}`]: r.prefix, [`sa${i}`]: r.allow ? 1 : 0 }));
    }
    const rows = this.#run(() => this.#listStatement(present, scope).all(params));
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

  async claimIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<IdempotencyClaim> {
    const op = { op: 'idempotency', action: 'claim', slot: { tenant: slot.tenant_id, key: slot.key, owner }, sealed, expires_ms: Date.now() + ttlMs } as const;
    return this.#write(op, (v) => (v as ClaimRow) ?? { state: 'claimed' });
  }

  async completeIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<boolean> {
    const op = { op: 'idempotency', action: 'complete', slot: { tenant: slot.tenant_id, key: slot.key, owner }, sealed, expires_ms: Date.now() + ttlMs } as const;
    return this.#write(op, (v) => v === true);
  }

  async releaseIdempotencyKey(slot: IdempotencySlot, owner: string): Promise<boolean> {
    return this.#write({ op: 'idempotency', action: 'release', slot: { tenant: slot.tenant_id, key: slot.key, owner } }, (v) => v === true);
  }

  async purgeIdempotencyKeys(now: Date): Promise<number> {
    const ms = now.getTime();
    if (!Number.isFinite(ms)) throw new TypeError('purgeIdempotencyKeys: invalid date');
    return this.#write({ op: 'idempotency', action: 'purge', now: ms }, (v) => (typeof v === 'number' ? v : 0));
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
    if (requests.length > 0 || this.#writer?.alive) await this.#dispatch(requests, true)?.exited;
    this.#writer = null;
    if (this.#db.open) this.#db.close();
  }

  #write<T>(op: WriteOp, narrow: (value: unknown) => T): Promise<T> {
    return this.#writeFrame(encodeOp(op), narrow);
  }

  /** Queues an encoded write (embedded-wire.ts encodeOp) for the next group commit. */
  #writeFrame<T>(frame: string, narrow: (value: unknown) => T): Promise<T> {
    if (this.#closed) return Promise.reject(new StoreUnavailableError('the embedded store is closed'));
    return new Promise<T>((resolve, reject) => {
      const settle = (v: unknown): void => {
        try {
          resolve(narrow(v));
        } catch (err) {
          reject(err); // a corrupt data key row
        }
      };
      this.#queue.push({ frame, resolve: settle, reject });
      if (!this.#flushScheduled) {
        this.#flushScheduled = true;
        setImmediate(() => this.#flush());
      }
    });
  }

  #take(): WriteRequest[] {
    this.#flushScheduled = false;
    const requests = this.#queue;
    this.#queue = [];
    return requests;
  }

  /**
   * While the writer is committing (its fsync), the writes of the next turns wait here and go
   * over in one message when it answers (#writerIdle): the writer would have committed them
   * together anyway, and each message costs the main thread a postMessage (4.8% of its time in
   * a /tokenize profile, one message per turn).
   */
  #flush(): void {
    this.#flushScheduled = false;
    if (this.#writer?.busy) return;
    const requests = this.#take();
    if (requests.length > 0) this.#dispatch(requests, false);
  }

  /** The writer answered everything it had (or died, rejecting it): send what waited meanwhile. */
  #writerIdle(): void {
    if (this.#queue.length > 0 && !this.#closed) this.#flush();
  }

  /**
   * Runs the writes in this thread (':memory:'), or hands them to the writer thread, starting a
   * new one when none is alive (a dead one has rejected its writes in flight).
   */
  #dispatch(requests: readonly WriteRequest[], close: boolean): WriterThread | null {
    if (this.#execute) {
      // The same decoding as the writer thread's, so both modes run the same path.
      this.#settle(requests, this.#execute(requests.map((r) => decodeOp(new WireReader(r.frame)))));
      return null;
    }
    try {
      if (!this.#writer?.alive) this.#writer = new WriterThread(this.path, () => this.#writerIdle());
    } catch (err) {
      const failure = new StoreUnavailableError('the embedded store writer cannot start', { cause: err });
      for (const r of requests) r.reject(failure);
      return null;
    }
    this.#writer.send(requests, close);
    return this.#writer;
  }

  #settle(requests: readonly WriteRequest[], results: readonly WriteResult[]): void {
    requests.forEach((r, i) => {
      const res = results[i];
      if (res.ok) r.resolve(res.value);
      else r.reject(writeError(describeError(res.error), res.error));
    });
  }

  /**
   * The list query for the conditions present; prepared once per combination and scope length.
   * The scope (the caller's permission filter) is a CASE over its prefixes in order: the first
   * that starts the container decides, so SQLite skips what the caller may not see and a page
   * is full.
   */
  #listStatement(present: Set<string>, scope: readonly ScopeRule[] | undefined): Database.Statement<[Params], Row> {
    let mask = 0;
    LIST_CONDITIONS.forEach(([name], i) => {
      if (present.has(name)) mask |= 1 << i;
    });
    const cacheKey = mask + (scope === undefined ? 0 : (scope.length + 1) * (1 << LIST_CONDITIONS.length));
    let stmt = this.#listStatements.get(cacheKey);
    if (!stmt) {
      const where = ['tenant_id = @tenant', LIVE, ...LIST_CONDITIONS.filter(([name]) => present.has(name)).map(([, sql]) => sql)];
      if (scope !== undefined) {
        const arms = scope.map((_, i) => `WHEN substr(container, 1, length(@sp${i})) = @sp${i} THEN @sa${i}`);
        where.push(`(CASE ${arms.join(' ')} ELSE 0 END) = 1`);
      }
      stmt = this.#db.prepare<[Params], Row>(`SELECT ${COLUMNS} FROM tokens WHERE ${where.join(' AND ')} ORDER BY seq DESC LIMIT @limit`);
      this.#listStatements.set(cacheKey, stmt);
    }
    return stmt;
  }

  /** Encoded and validated here, so a bad date is a TypeError for this caller alone. */
  /** `withDedupeKey`: an insert without deduplication stores no slot, so its key is not built. */
  #row(r: StoredToken, withDedupeKey = true): WriteRow {
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
      dedupe_key: withDedupeKey ? dedupeKey(r) : null,
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
