/**
 * Group commit of plain token inserts.
 *
 * A batch with no deduplicating record is one multi-row INSERT, sent without BEGIN/COMMIT: one
 * statement is its own transaction (all rows or none), so a request costs one round trip instead
 * of three. Concurrent batches share statements: at most `maxInFlight` statements run at once;
 * batches that arrive meanwhile queue, and the next free slot writes everything queued in one
 * statement (one commit, one WAL flush for all of them). A lone batch is never delayed: it is sent
 * at once when a slot is free.
 *
 * Guarantees kept: a batch's promise resolves only after the statement holding its rows returned,
 * i.e. committed (synchronous_commit as configured, on by default). Each batch stays all or
 * nothing: when a shared statement fails on a row (a data or constraint error, SQLSTATE class 22
 * or 23: a taken id), nothing of it was written, and each batch is then written in a statement of
 * its own, so one request's duplicate id fails that request only. A failure of the connection or
 * the server fails every batch of the statement (retrying would only add load to a failing
 * database).
 *
 * Each batch has the deadline of a store call (pool.ts deadlineOf), from the moment it is queued:
 * a statement carries its batches' earliest deadline (the wait for a connection and the statement
 * itself are bounded by it), and a batch whose deadline passed while it queued is failed with code
 * `timeout` without being sent. A batch waits only behind statements whose batches came earlier,
 * whose deadlines are earlier, so on a database that stops answering every batch fails by its own
 * deadline, not after the statements ahead of it.
 *
 * Statements are prepared by name per row count (node-postgres prepares a named statement once per
 * connection), so the server parses and plans each shape once per connection instead of per
 * request; row counts above NAMED_ROWS run unnamed.
 */
import pg from 'pg';
import { boundedQuery, deadlineOf, storeError } from './pool.js';

/** Rows one statement carries at most (23 parameters a row; PostgreSQL allows 65,535 a statement). */
export const MAX_ROWS = 1000;
/** Row counts up to this are prepared statements (per connection: at most this many insert plans). */
const NAMED_ROWS = 128;

interface Pending {
  rows: unknown[][];
  /** performance.now() time by which its statement must have answered. */
  deadline: number;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** A server error caused by the values sent (the statement wrote nothing; another statement may succeed). */
function isRowError(err: unknown): boolean {
  return err instanceof pg.DatabaseError && /^2[23]/.test(err.code ?? '');
}

export class InsertBatcher {
  #queue: Pending[] = [];
  #inFlight = 0;

  /**
   * `sql(n)`: the INSERT of n rows with parameters $1… in row order. `maxInFlight`: statements at
   * once (the rest of the pool stays free for reads and deduplicating writes).
   */
  constructor(
    private readonly pool: pg.Pool,
    private readonly sql: (rows: number) => string,
    private readonly maxInFlight: number,
  ) {}

  /** Writes these rows (at most MAX_ROWS) in one committed statement, alone or with other batches' rows. */
  insert(rows: unknown[][]): Promise<void> {
    if (rows.length === 0) return Promise.resolve();
    if (rows.length > MAX_ROWS) return Promise.reject(new RangeError(`at most ${MAX_ROWS} rows a statement`));
    return new Promise((resolve, reject) => {
      this.#queue.push({ rows, deadline: deadlineOf(this.pool), resolve, reject });
      this.#pump();
    });
  }

  #pump(): void {
    while (this.#inFlight < this.maxInFlight && this.#queue.length > 0) {
      const group: Pending[] = [];
      let n = 0;
      const now = performance.now();
      while (this.#queue.length > 0 && n + this.#queue[0]!.rows.length <= MAX_ROWS) {
        const next = this.#queue.shift()!;
        // Queued past its deadline (behind statements that hung): failed, never sent.
        if (next.deadline <= now) {
          next.reject(storeError(new Error('timeout: the insert waited past its deadline for a statement slot')));
          continue;
        }
        group.push(next);
        n += next.rows.length;
      }
      if (group.length === 0) continue;
      this.#inFlight++;
      void this.#write(group).finally(() => {
        this.#inFlight--;
        this.#pump();
      });
    }
  }

  async #write(group: Pending[]): Promise<void> {
    try {
      await this.#statement(group.length === 1 ? group[0]!.rows : group.flatMap((g) => g.rows), Math.min(...group.map((g) => g.deadline)));
      for (const g of group) g.resolve();
    } catch (err) {
      if (group.length > 1 && isRowError(err)) {
        // Nothing of the shared statement was written: each batch on its own, all or nothing.
        await Promise.all(group.map((g) => this.#statement(g.rows, g.deadline).then(g.resolve, (e: unknown) => g.reject(storeError(e)))));
        return;
      }
      const failed = storeError(err);
      for (const g of group) g.reject(failed);
    }
  }

  /** One INSERT of these rows by `deadline`; rejects with pg's own error or a timeout (the caller maps it). */
  async #statement(rows: unknown[][], deadline: number): Promise<void> {
    const n = rows.length;
    const values = n === 1 ? rows[0]! : rows.flat();
    await boundedQuery(this.pool, n <= NAMED_ROWS ? { name: `tokenproxy_insert_tokens_${n}`, text: this.sql(n), values } : { text: this.sql(n), values }, deadline);
  }
}
