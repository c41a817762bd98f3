/**
 * The embedded store's connection, shared by its four ports: the SQLite file
 * (opened and migrated here, schema.ts), this thread's read connection, and the queue of writes
 * to the writer thread (writer.ts) with its group commit.
 *
 * Durability: WAL with synchronous=FULL fsyncs the WAL at every commit, so a write that has
 * resolved survives kill -9 and power loss (https://www.sqlite.org/pragma.html#pragma_synchronous).
 *
 * Threads: every write runs on a writer thread (writer.ts) with a second connection to the same
 * file, so the commit and its fsync (about a quarter of the tokenizing proxy's main thread, and a
 * stall of the event loop while the disk syncs) happen off the main thread. Reads stay on this
 * thread's connection: WAL lets them run while the writer commits, and a write resolves only after
 * the writer's COMMIT returned, so the next read sees it. A ':memory:' database cannot be shared
 * with another thread: there the same transactions run in this one.
 */
import type Database from 'better-sqlite3';
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Worker } from 'node:worker_threads';
import { InvalidCursorError } from '../codec.js';
import { StoreFormatError, StoreUnavailableError } from '../types.js';
import { openSchema, SCHEMA_VERSION } from './schema.js';
import { decodeOp, encodeOp, WireReader } from './wire.js';
import {
  describeError, openConnection, sqliteCode, writeError, writeExecutor, WriterThread,
  type WriteOp, type WriteRequest, type WriteResult,
} from './writer.js';

export class EmbeddedConnection {
  /** This thread's connection: every read. */
  readonly db: Database.Database;
  /** In-thread writes (':memory:' only); null when a writer thread does them. */
  readonly #execute: ((ops: readonly WriteOp[]) => WriteResult[]) | null = null;
  #writer: WriterThread | null = null;
  /** Writes waiting for the next group commit (see writeFrame). */
  #queue: WriteRequest[] = [];
  #flushScheduled = false;
  #closed: Promise<void> | null = null;
  /** The format the file holds: SCHEMA_VERSION, or an older one when opened `forMigration`. */
  readonly version: number;

  /**
   * Opens (creating if needed) the database at `path`, or ':memory:'. A file of an older format is
   * StoreFormatError unless `forMigration` (tokenproxy migrate): then it is opened
   * as it is, and no writer thread starts until a write needs one (after the conversion).
   */
  constructor(readonly path: string, opts: { forMigration?: boolean } = {}) {
    let version = 0;
    let opened: Database.Database | undefined;
    try {
      if (path !== ':memory:') {
        mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
        // Created 0600 before SQLite opens it; SQLite gives -wal/-shm the same mode.
        closeSync(openSync(path, 'a', 0o600));
      }
      opened = openConnection(path);
      version = openSchema(opened, opts);
    } catch (err) {
      // An old format is the operator's to convert: said as it is, the file left as it was.
      if (opened?.open) opened.close();
      if (err instanceof StoreFormatError) throw err;
      const reason = err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : String(err instanceof Error ? err.message : err);
      throw new StoreUnavailableError(`cannot open the embedded store ${path}: ${reason}`, { cause: err });
    }
    this.db = opened!;
    this.version = version;
    // The schema exists now; the writer opens its own connection to it.
    if (path === ':memory:') this.#execute = writeExecutor(this.db);
    else if (version === SCHEMA_VERSION) this.#writer = new WriterThread(path, () => this.#writerIdle());
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
    if (this.db.open) this.db.close();
  }

  write<T>(op: WriteOp, narrow: (value: unknown) => T): Promise<T> {
    return this.writeFrame(encodeOp(op), narrow);
  }

  /**
   * Queues an encoded write (wire.ts encodeOp) for the next group commit. Group commit: writes
   * that arrive within one turn of the event loop go to the writer in one message; the writer
   * commits every message it has received by its next turn in one transaction with one fsync, and
   * each promise resolves only after that commit (so a resolved insert survives kill -9). A lone
   * insert waits only for two setImmediates.
   */
  writeFrame<T>(frame: string, narrow: (value: unknown) => T): Promise<T> {
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

  /** Runs a synchronous read, turning I/O failures into StoreUnavailableError. */
  run<T>(fn: () => T): T {
    if (this.#closed || !this.db.open) throw new StoreUnavailableError('the embedded store is closed');
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
