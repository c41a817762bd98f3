/**
 * The embedded store's writes, off the main thread (EmbeddedConnection in connection.ts holds a
 * WriterThread): the write transactions, the thread that runs them on its own connection to the
 * SQLite file, and that thread's entry (the end of this file). A write is answered only after its
 * COMMIT returned, so a resolved write is durable (synchronous=FULL) and visible to the next read
 * on the main thread's connection (WAL). ':memory:' cannot be shared with a thread: there
 * the connection runs writeExecutor in-thread, the same transactions.
 */
import type Database from 'better-sqlite3';
import { Sqlite } from './sqlite.js';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, Worker, workerData, type MessagePort } from 'node:worker_threads';
import { encodeEvent, type AuditHead } from '../audit.js';
import { DuplicateTokenError, StoreUnavailableError, type StoredToken } from '../types.js';
import { idempotencyWrites } from './idempotency-writes.js';
import { reactorResultWrites } from './reactor-results-writes.js';
import { cvcOf, fromRow, packHex, packId, ROW_COLUMNS, TokenWrites, type Packed, type TokenRow } from './format.js';
import { decodeRequests, decodeResults, encodeRequest, encodeResult } from './wire.js';
import type { WriteOp } from './ops.js';

const WRITER_ROLE = 'tokenproxy embedded-store writer';
interface WriterData {
  role: typeof WRITER_ROLE;
  path: string;
}

export const LIVE = '(expires_ms IS NULL OR expires_ms > @now)';

export type { Params, WriteOp, WriteRow } from './ops.js';

export type WriteResult = { ok: true; value: unknown } | { ok: false; error: unknown };

/** A write failure as it crosses the thread boundary: no message, no values, only what it was. */
export type ErrorDescriptor = { kind: 'duplicate'; id: string } | { kind: 'sqlite'; code: string } | { kind: 'other' };

/**
 * Main thread → writer: the writes of one event-loop turn as one string (wire.ts
 * encodeRequest per write), then CLOSE after the last. Writer → main thread: one string with one
 * answer per write (encodeResult), sent after their transaction committed (or failed).
 */
type WriterMessage = string | typeof CLOSE;
const CLOSE = { close: true } as const;

export function sqliteCode(err: unknown): string | null {
  return err instanceof Sqlite.SqliteError ? err.code : null;
}

export function describeError(err: unknown): ErrorDescriptor {
  if (err instanceof DuplicateTokenError) return { kind: 'duplicate', id: err.id };
  const code = sqliteCode(err);
  return code ? { kind: 'sqlite', code } : { kind: 'other' };
}

/** The error a caller sees for a failed write (`cause` only when it happened in this thread). */
export function writeError(d: ErrorDescriptor, cause?: unknown): Error {
  if (d.kind === 'duplicate') return new DuplicateTokenError(d.id);
  const options = cause === undefined ? undefined : { cause };
  if (d.kind === 'sqlite') return new StoreUnavailableError(`the embedded store failed (${d.code})`, options);
  return new StoreUnavailableError('the embedded store failed', options);
}

/** A connection with the settings every connection needs (they are per connection, except WAL). */
/** How long opening a file shared with other processes may wait out their locks in all. */
const OPEN_BUSY_LIMIT_MS = 10_000;

/**
 * Runs `fn` again while it fails with SQLITE_BUSY, for up to OPEN_BUSY_LIMIT_MS. SQLite returns
 * BUSY without calling the busy handler where waiting could deadlock, e.g. when two processes
 * (server.workers) switch a new file to WAL or migrate it at the same moment: one of them wins,
 * and the other's retry then finds the work done. Opening only, so the wait is synchronous.
 */
export function retryBusy<T>(fn: () => T): T {
  const end = Date.now() + OPEN_BUSY_LIMIT_MS;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (let wait = 5; ; wait = Math.min(wait * 2, 200)) {
    try {
      return fn();
    } catch (err) {
      if (sqliteCode(err) !== 'SQLITE_BUSY' || Date.now() + wait > end) throw err;
      Atomics.wait(pause, 0, 0, wait);
    }
  }
}

/**
 * The WAL's size (pages) that triggers a checkpoint: 4000 pages of 4 KiB, a WAL of about 16 MB
 * at most while no reader holds it back. Measured on the writer alone (50-row commits of one
 * plain string each, a fresh file, 50,000 rows): 18 µs of CPU a row against 21 µs at 1000.
 */
export const WAL_AUTOCHECKPOINT_PAGES = 4000;

export function openConnection(path: string): Database.Database {
  const db = new Sqlite(path);
  // First: with several processes on one file (server.workers), even switching to WAL can meet a lock.
  db.pragma('busy_timeout = 5000');
  retryBusy(() => db.pragma('journal_mode = WAL'));
  db.pragma('synchronous = FULL');
  db.pragma('foreign_keys = ON');
  // Checkpoint every WAL_AUTOCHECKPOINT_PAGES instead of SQLite's 1000 (only a connection that
  // commits checkpoints: the writer's). Durability is the same (every COMMIT still fsyncs the
  // WAL); a checkpoint copies each page once however often it changed since the last one, and a
  // tokenize commit rewrites many of the same pages (the (tenant_id, id) index's leaves under
  // random ids, the tables' last pages), so fewer, larger checkpoints copy and fsync less.
  db.pragma(`wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES}`);
  return db;
}

/**
 * The write side, shared by the writer thread and the in-thread (':memory:') mode: a function that
 * runs a list of writes in ONE transaction (one WAL fsync), each write in a savepoint of its own
 * (better-sqlite3 nests transactions as savepoints), so a duplicate id fails that insertMany alone
 * and the others commit. Any other failure rolls the whole group back and fails every write in it.
 */
export function writeExecutor(db: Database.Database): (ops: readonly WriteOp[]) => WriteResult[] {
  // Format 6 (format.ts): the insert and side-table statements are shared with the 5 -> 6 conversion.
  const tokens = new TokenWrites(db);
  const dict = tokens.dict;
  const s = {
    // The oldest live token a deduplicating insert returns instead of writing (vault_tokens_by_fingerprint).
    dedupeMatch: db.prepare<[number, Packed, number, number, number], TokenRow>(
      `SELECT ${ROW_COLUMNS} FROM vault_tokens WHERE tenant = ? AND fingerprint = ? AND type = ? AND container = ?
       AND (expires_ms IS NULL OR expires_ms > ?) ORDER BY seq LIMIT 1`,
    ),
    // No live token matched: whoever held the slot expired (or was patched to another fingerprint).
    releaseDedupe: db.prepare<[number, number, number, Packed]>(
      'UPDATE vault_tokens SET dedupe = NULL WHERE tenant = ? AND type = ? AND container = ? AND fingerprint = ? AND dedupe IS NOT NULL',
    ),
    liveSeq: db.prepare<[number, Packed, number], { seq: number }>('SELECT seq FROM vault_tokens WHERE tenant = ? AND id = ? AND (expires_ms IS NULL OR expires_ms > ?)'),
    // A token keeps its deduplication slot only while its type, container and fingerprint stay the same.
    update: db.prepare<[Record<string, unknown>]>(
      `UPDATE vault_tokens SET dedupe = CASE WHEN type = @type AND container = @container AND fingerprint = @fingerprint THEN dedupe END,
       type = @type, container = @container, sealed = @sealed, fingerprint = @fingerprint, expires_ms = @expires_ms,
       cvc_sealed = @cvc_sealed, cvc_expires_ms = @cvc_expires_ms, created_by = @created_by, created_ms = @created_ms,
       fp_expr = @fp_expr, rest = @rest WHERE seq = @seq`,
    ),
    delete: db.prepare<[number, Packed], { expires_ms: number | null }>('DELETE FROM vault_tokens WHERE tenant = ? AND id = ? RETURNING expires_ms'),
    purgeCvc: db.prepare<[number]>('UPDATE vault_tokens SET cvc_sealed = NULL WHERE cvc_sealed IS NOT NULL AND cvc_expires_ms <= ?'),
    listKeys: db.prepare<[], { kid: string; wrapped: string; created_at: string }>('SELECT kid, wrapped, created_at FROM data_keys ORDER BY ord'),
    addKey: db.prepare<[string, string, string]>('INSERT OR IGNORE INTO data_keys (kid, wrapped, created_at) VALUES (?, ?, ?)'),
    auditHead: db.prepare<[string], AuditHead>('SELECT seq, hash FROM audit_heads WHERE tenant_id = ?'),
    auditInsert: db.prepare<[string, number, number, string]>('INSERT INTO audit_events (tenant_id, seq, created_ms, event) VALUES (?, ?, ?, ?)'),
    auditSetHead: db.prepare<[string, number, string, string | null]>(
      `INSERT INTO audit_heads (tenant_id, seq, hash, anchor) VALUES (?, ?, ?, ?)
       ON CONFLICT (tenant_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, anchor = excluded.anchor`,
    ),
  };
  const idempotency = idempotencyWrites(db);
  const reactorResults = reactorResultWrites(db);
  const apply = (w: WriteOp): unknown => {
    switch (w.op) {
      case 'insert': {
        // Per row: null when written, the existing token when deduplicated (its record, with its cvc
        // as stored: the main thread hides one past its deadline). The match and the write are in one
        // transaction of the one writer; the unique index vault_tokens_dedupe makes "one
        // deduplicated token per tenant, type, container and fingerprint" a constraint.
        const out: (StoredToken | null)[] = [];
        for (const r of w.rows) {
          const c = r.columns;
          const dedupe = r.dedupe === true && c.fingerprint !== null;
          if (dedupe) {
            const tenant = dict.number(c.tenant);
            const type = dict.number(c.type);
            const container = dict.number(c.container);
            const fp = packHex(c.fingerprint!);
            const hit = s.dedupeMatch.get(tenant, fp, type, container, Date.now());
            if (hit) {
              out.push(fromRow(hit, dict, cvcOf(hit)));
              continue;
            }
            s.releaseDedupe.run(tenant, type, container, fp);
          }
          try {
            tokens.insert(c, r, dedupe);
          } catch (err) {
            const code = sqliteCode(err);
            const onDedupe = err instanceof Error && err.message.includes('vault_tokens.fingerprint');
            if (!onDedupe && (code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY')) throw new DuplicateTokenError(r.id);
            throw err;
          }
          out.push(null);
        }
        return out;
      }
      case 'update': {
        const c = w.row.columns;
        const tenant = dict.find(c.tenant);
        const live = tenant === null ? undefined : s.liveSeq.get(tenant, packId(c.id), Date.now());
        if (!live) return false;
        const { tenant: _tenant, id: _id, ...v } = tokens.bind(c);
        s.update.run({ ...v, seq: live.seq });
        tokens.clearSide(live.seq);
        tokens.writeSide(tenant!, w.row, live.seq);
        return true;
      }
      case 'delete': {
        // True only when it was live: an expired token counts as missing.
        const tenant = dict.find(w.tenant_id);
        const row = tenant === null ? undefined : s.delete.get(tenant, packId(w.id));
        return row !== undefined && (row.expires_ms === null || row.expires_ms > Date.now());
      }
      case 'purgeCvc':
        return s.purgeCvc.run(w.now).changes;
      case 'addKey':
        s.addKey.run(w.key.kid, w.key.wrapped, w.key.created_at);
        return s.listKeys.all();
      case 'idempotency':
        return idempotency(w);
      case 'reactorResult':
        return reactorResults(w);
      case 'audit': {
        // Compare-and-set: the head is compared and moved in this transaction of the one writer
        // (and SQLite's write lock serializes other processes), so appends form one chain; a head
        // that moved since the main thread read it answers false, and the caller chains again.
        const now = s.auditHead.get(w.tenant_id);
        if ((now?.seq ?? 0) !== (w.expect?.seq ?? 0) || (now?.hash ?? null) !== (w.expect?.hash ?? null)) return false;
        for (const e of w.events) s.auditInsert.run(w.tenant_id, e.seq, Date.parse(e.created_at), encodeEvent(e));
        s.auditSetHead.run(w.tenant_id, w.head.seq, w.head.hash, w.head.anchor);
        return true;
      }
    }
  };
  // As a nested better-sqlite3 transaction, `one` is a savepoint: a write that fails rolls back alone.
  const one = db.transaction(apply);
  const isolated = db.transaction((ops: readonly WriteOp[], out: WriteResult[]) => {
    for (const w of ops) {
      try {
        out.push({ ok: true, value: one(w) });
      } catch (err) {
        if (!(err instanceof DuplicateTokenError)) throw err;
        // The savepoint's dict entries were rolled back with it.
        dict.forget();
        out.push({ ok: false, error: err });
      }
    }
  });
  // The common case, no duplicate id in the group, without a SAVEPOINT and RELEASE per write.
  const direct = db.transaction((ops: readonly WriteOp[], out: WriteResult[]) => {
    for (const w of ops) out.push({ ok: true, value: apply(w) });
  });
  // IMMEDIATE: the write lock is taken (waiting busy_timeout) before the first read. A deferred
  // transaction that reads first (a dedupe match) fails at once with SQLITE_BUSY when another
  // process's writer (server.workers) committed since its read.
  const run = (tx: typeof direct, ops: readonly WriteOp[]): WriteResult[] => {
    const out: WriteResult[] = [];
    try {
      tx.immediate(ops, out);
    } catch (err) {
      dict.forget();
      return ops.map(() => ({ ok: false, error: err }));
    }
    return out;
  };
  return (ops) => {
    const out = run(direct, ops);
    // A duplicate id rolled the whole group back: run it again with each write in its own
    // savepoint, so only the write with the duplicate fails. Nothing of the first try committed.
    if (ops.length > 1 && !out[0]!.ok && out[0]!.error instanceof DuplicateTokenError) return run(isolated, ops);
    return out;
  };
}

/**
 * Starts this file as the writer thread: dist/store/embedded/writer.js in the built service, the
 * .ts file when running from source under a TypeScript loader (tap's ts-node, tsx). The worker
 * inherits process.execArgv, but tsx (4.23 here) registers its hooks in worker threads only from
 * Node 22.22.3/24.11.1 on (https://github.com/privatenumber/tsx/issues/354): on Node 20 the .ts
 * entry starts from a small bootstrap that registers tsx itself when the inherited loader cannot
 * load .ts (tap's ts-node can).
 */
function startWriter(dbPath: string): Worker {
  const workerData: WriterData = { role: WRITER_ROLE, path: dbPath };
  if (!import.meta.url.endsWith('.ts')) return new Worker(fileURLToPath(import.meta.url), { workerData });
  let tsx: string | null = null;
  try {
    tsx = import.meta.resolve('tsx/esm/api');
  } catch {
    // no tsx: the inherited loader must handle .ts on its own
  }
  const bootstrap = `
    const entry = ${JSON.stringify(import.meta.url)}, tsx = ${JSON.stringify(tsx)};
    import(entry).catch(async (err) => {
      // Node 20 refuses .ts (ERR_UNKNOWN_FILE_EXTENSION); Node 22.18+/24 strip the types itself
      // but cannot map our './x.js' imports to x.ts (ERR_MODULE_NOT_FOUND): tsx handles both.
      if ((err?.code !== 'ERR_UNKNOWN_FILE_EXTENSION' && err?.code !== 'ERR_MODULE_NOT_FOUND') || tsx === null) throw err;
      (await import(tsx)).register();
      await import(entry + '?tsx');
    });`;
  return new Worker(bootstrap, { eval: true, workerData });
}

export interface WriteRequest {
  /** The write as wire.ts encodeOp wrote it (encoded by the caller, in its own turn). */
  frame: string;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

/**
 * One writer thread. It keeps the process alive only while a write is in flight (ref'd then,
 * unref'd when idle). When it dies, every write in flight rejects; the store starts a new one.
 */
export class WriterThread {
  readonly #worker: Worker;
  readonly #inflight = new Map<number, WriteRequest>();
  #nextId = 1;
  #closing = false;
  #alive = true;
  readonly exited: Promise<void>;

  /** Called once nothing is in flight any more, after answers or after the thread died. */
  readonly #onIdle: () => void;

  constructor(dbPath: string, onIdle: () => void = () => {}) {
    this.#onIdle = onIdle;
    this.#worker = startWriter(dbPath);
    this.#worker.unref();
    this.#worker.on('message', (m: string) => this.#answer(m));
    // An uncaught error in the writer ('error') is always followed by 'exit', which rejects.
    this.#worker.on('error', () => {});
    this.exited = new Promise((resolve) => {
      this.#worker.once('exit', () => {
        this.#alive = false;
        const lost = [...this.#inflight.values()];
        this.#inflight.clear();
        for (const r of lost) r.reject(new StoreUnavailableError('the embedded store writer stopped'));
        resolve();
        this.#onIdle();
      });
    });
  }

  get alive(): boolean {
    return this.#alive;
  }

  /** Whether a sent write is not answered yet. */
  get busy(): boolean {
    return this.#inflight.size > 0;
  }

  get worker(): Worker {
    return this.#worker;
  }

  send(requests: readonly WriteRequest[], close = false): void {
    if (this.#inflight.size === 0 || close) this.#worker.ref();
    if (close) this.#closing = true;
    const ids: number[] = [];
    let text = '';
    for (const r of requests) {
      const id = this.#nextId++;
      this.#inflight.set(id, r);
      ids.push(id);
      text += encodeRequest(id, r.frame);
    }
    try {
      if (text !== '') this.#worker.postMessage(text satisfies WriterMessage);
      if (close) this.#worker.postMessage(CLOSE satisfies WriterMessage);
    } catch (err) {
      // The port refused the message: these writes fail, the writer is unharmed.
      for (const id of ids) this.#inflight.get(id)?.reject(new StoreUnavailableError('the embedded store failed', { cause: err }));
      for (const id of ids) this.#inflight.delete(id);
      if (close) void this.#worker.terminate();
      else if (this.#inflight.size === 0) this.#worker.unref();
    }
  }

  #answer(m: string): void {
    for (const res of decodeResults(m)) {
      const r = this.#inflight.get(res.id);
      if (!r) continue;
      this.#inflight.delete(res.id);
      if (res.ok) r.resolve(res.value);
      else r.reject(writeError((res.error as ErrorDescriptor | undefined) ?? { kind: 'other' }));
    }
    if (this.#inflight.size === 0 && !this.#closing) {
      this.#worker.unref();
      this.#onIdle();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The writer thread's entry: runs only in a Worker started by WriterThread (startWriter).
// ---------------------------------------------------------------------------------------------

function isWriterData(v: unknown): v is WriterData {
  return typeof v === 'object' && v !== null && 'role' in v && v.role === WRITER_ROLE && 'path' in v && typeof v.path === 'string';
}

/**
 * Group commit on this side: every message received before the next setImmediate is committed in
 * one transaction, then answered in one message. After `close`, the connection closes and nothing
 * keeps the thread alive: it exits once the answers are delivered.
 */
function serve(port: MessagePort, path: string): void {
  const db = openConnection(path);
  const execute = writeExecutor(db);
  let queue: Array<{ id: number; op: WriteOp }> = [];
  let scheduled = false;
  let closing = false;
  const drain = (): void => {
    scheduled = false;
    const ops = queue;
    queue = [];
    if (ops.length > 0) {
      const results = execute(ops.map((o) => o.op));
      let reply = '';
      results.forEach((r, i) => {
        reply += encodeResult(r.ok ? { id: ops[i].id, ok: true, value: r.value } : { id: ops[i].id, ok: false, error: describeError(r.error) });
      });
      port.postMessage(reply);
    }
    if (closing) {
      db.close();
      port.close();
    }
  };
  port.on('message', (m: WriterMessage) => {
    if (typeof m === 'string') {
      for (const o of decodeRequests(m)) queue.push(o);
    } else closing = true;
    if (!scheduled) {
      scheduled = true;
      setImmediate(drain);
    }
  });
}

if (!isMainThread && parentPort && isWriterData(workerData)) serve(parentPort, workerData.path);
