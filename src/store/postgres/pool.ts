/**
 * The PostgreSQL store's connection pool and its failures.
 *
 * One pg.Pool per store (per process). Bounded waits, so a request never hangs on a database that
 * is gone or frozen. Every store call (one statement, one transaction, one batched insert) has
 * one deadline, `queryTimeoutMs` after it began, that covers everything it waits for: a free
 * connection of the pool, a new connection being opened, its turn in the insert batcher, the
 * statements. A call past its deadline fails with code `timeout`:
 *
 *   - waiting for a connection: pg-pool gives up after `connectTimeoutMs` (connectionTimeoutMillis:
 *     a new connection's TCP and startup, or a free client of a full pool); a call with less of
 *     its deadline left races the pool with a timer of its own (acquire), and a connection handed
 *     over after that goes straight back;
 *   - a statement: pg's client-side query_timeout, set per statement to what is left of the
 *     deadline (the pool's own query_timeout is the whole deadline); the server cancels a
 *     statement after the same time (statement_timeout), so a slow statement is stopped on both
 *     sides;
 *   - a transaction: a timer closes its connection when the deadline passes with a statement
 *     unanswered (the statement fails; the server rolls the transaction back when it sees the
 *     connection gone).
 *
 * A client whose query timed out or whose socket failed is released with the error, which makes
 * pg-pool destroy it (pg 8 closes the socket of a client ended with a query in flight); the next
 * request opens a new connection, so the pool recovers by itself once the database is back.
 *
 * Errors: every failure of the database or the connection becomes StoreUnavailableError with
 * its code (the SQLSTATE, the socket error code, `timeout` or `connection_closed`) and class
 * (unavailable.ts); pg's own messages and details can quote values (a key in a unique
 * violation), so they never reach a message, and the pg error kept as its cause is a sanitized
 * copy (sanitize below), as the Redis store keeps its own.
 */
import pg from 'pg';
import { parseIntoClientConfig } from 'pg-connection-string';
import { readFileSync } from 'node:fs';
import type { Logger } from '../../log.js';
import { DuplicateTokenError, StoreUnavailableError } from '../types.js';
import { classify } from '../unavailable.js';
import { InvalidCursorError } from '../codec.js';
import type { SecretRef } from '../../redis/connect.js';

export interface PostgresPoolOptions {
  /** postgres://user@host:port/database?sslmode=… (parsed by pg-connection-string). */
  url: string;
  /** Overrides a password in the URL (store.password, or TOKENPROXY_STORE_PASSWORD via the config). */
  password?: SecretRef | undefined;
  poolSize?: number | undefined;
  /** Connecting, and waiting for a free client of the pool (default 2000 ms). */
  connectTimeoutMs?: number | undefined;
  /** Each store call's deadline, client side; each statement's on the server (default 5000 ms). */
  queryTimeoutMs?: number | undefined;
  log?: Logger | undefined;
}

export type Queryable = Pick<pg.PoolClient, 'query'>;

function readPassword(ref: SecretRef | undefined): string | undefined {
  if (ref === undefined || typeof ref === 'string') return ref;
  try {
    return readFileSync(ref.file, 'utf8').replace(/\r?\n$/, '');
  } catch (err) {
    throw new Error(`cannot read the PostgreSQL password file ${ref.file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

export function createPool(opts: PostgresPoolOptions): pg.Pool {
  const queryTimeout = opts.queryTimeoutMs ?? 5000;
  const password = readPassword(opts.password);
  // Parsed here, not passed as connectionString: pg merges a connectionString's fields over the
  // explicit ones (lib/connection-parameters.js), so a given password would lose to the URL's (none).
  let parsed: pg.ClientConfig;
  try {
    parsed = parseIntoClientConfig(opts.url);
  } catch {
    throw new StoreUnavailableError('store.url is not a PostgreSQL connection URL');
  }
  const pool = new pg.Pool({
    ...parsed,
    ...(password !== undefined ? { password } : {}),
    max: opts.poolSize ?? 10,
    connectionTimeoutMillis: opts.connectTimeoutMs ?? 2000,
    query_timeout: queryTimeout,
    statement_timeout: queryTimeout,
    // A row lock held by a crashed peer's transaction is released with its connection; a
    // transaction that waits longer than this for one answers 503 instead of hanging.
    lock_timeout: queryTimeout,
    idle_in_transaction_session_timeout: queryTimeout * 2,
    idleTimeoutMillis: 10_000,
    application_name: 'tokenproxy',
  });
  // An idle client whose server went away emits here; pg-pool has already dropped it. Without a
  // listener that is an uncaught exception.
  pool.on('error', (err) => {
    const code = errorCode(err);
    opts.log?.warn({ code, class: classify(code) }, 'a PostgreSQL connection of the token store failed');
  });
  return pool;
}

/** The SQLSTATE of a server error, or the socket's errno code, or a short name of what failed; never pg's message (it can quote values). Also the rate limits' (rate-limit/postgres.ts). */
export function errorCode(err: unknown): string {
  if (err && typeof err === 'object') {
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && /^[A-Z0-9_]{1,32}$/.test(code)) return code;
    const message = (err as { message?: unknown }).message;
    if (typeof message === 'string') {
      if (/timeout/i.test(message)) return 'timeout';
      if (/terminated|ended|closed|not queryable|after calling end/i.test(message)) return 'connection_closed';
    }
  }
  return 'error';
}

/** A server-reported error (the connection itself is still usable after it). */
function isDatabaseError(err: unknown): boolean {
  return err instanceof pg.DatabaseError && !/^(08|57P)/.test(err.code ?? '');
}

/** The fields of a server error that name our own schema objects or classify it: never a value. */
const SAFE_FIELDS = ['severity', 'code', 'schema', 'table', 'column', 'dataType', 'constraint', 'routine'] as const;

/**
 * The cause a StoreUnavailableError keeps: pg's error without what can quote a value. A
 * server error's message can quote an input ('invalid input syntax for type …: "…"'), its detail a
 * key or a whole row ('Key (kid)=(…) already exists.', 'Failing row contains (…)'), its hint,
 * where and internal query more; a logger that prints causes would write them out. Kept: the
 * SQLSTATE, the severity and the names of the schema objects involved, in a pg.DatabaseError (so
 * isUniqueViolation still reads it). Other failures (socket, timeout, a closed pool) carry no
 * value: their name, errno code and first 200 characters are kept.
 */
export function sanitize(err: unknown): Error {
  if (err instanceof pg.DatabaseError) {
    const safe = new pg.DatabaseError(`PostgreSQL error ${errorCode(err)}`, 0, 'error');
    for (const field of SAFE_FIELDS) safe[field] = err[field];
    return safe;
  }
  const safe: Error & { code?: string } = new Error(err instanceof Error ? err.message.slice(0, 200) : 'unknown error');
  safe.name = err instanceof Error ? err.name : 'Error';
  const code = err && typeof err === 'object' ? (err as { code?: unknown }).code : undefined;
  if (typeof code === 'string') safe.code = code;
  return safe;
}

/** Errors the store's callers handle themselves pass; everything else is the store failing. */
export function storeError(err: unknown): unknown {
  if (err instanceof DuplicateTokenError || err instanceof StoreUnavailableError || err instanceof InvalidCursorError
    || err instanceof RangeError || err instanceof TypeError) return err;
  const code = errorCode(err);
  return new StoreUnavailableError(`the PostgreSQL store failed (${code})`, { cause: sanitize(err), code: code === 'error' ? undefined : code });
}

/** A store call's deadline (performance.now() time) when it begins now: the pool's query_timeout ahead. */
export function deadlineOf(pool: pg.Pool): number {
  return performance.now() + (pool.options.query_timeout || 5000);
}

/** What a call past its deadline fails with (errorCode reads `timeout` from the message). */
function deadlineExceeded(): Error {
  return new Error('timeout: the store call got no answer within its deadline');
}

/** Milliseconds left before `deadline`. */
const left = (deadline: number): number => deadline - performance.now();

/**
 * A connection of the pool by `deadline`: pg-pool's own connectionTimeoutMillis bounds the wait
 * when that much is left; with less left, a timer of its own races it, and a connection the pool
 * hands over after the deadline goes straight back.
 */
async function acquire(pool: pg.Pool, deadline: number): Promise<pg.PoolClient> {
  const ms = left(deadline);
  if (ms <= 0) throw deadlineExceeded();
  const connecting = pool.connect();
  const limit = pool.options.connectionTimeoutMillis;
  if (limit && ms >= limit) return connecting;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([connecting, new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(deadlineExceeded()), ms);
    })]);
  } catch (err) {
    connecting.then((c) => c.release(), () => {});
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/** The statement with pg's client-side query_timeout set to what is left of the deadline (pg's client.js reads it per query; @types/pg does not list it). */
function bounded(config: pg.QueryConfig, deadline: number): pg.QueryConfig {
  const ms = Math.ceil(left(deadline));
  if (ms <= 0) throw deadlineExceeded();
  const out: pg.QueryConfig & { query_timeout: number } = { ...config, query_timeout: ms };
  return out;
}

/** SQLSTATE 23505 on the constraint named. */
export function isUniqueViolation(err: unknown, constraint: string): boolean {
  return err instanceof pg.DatabaseError && err.code === '23505' && err.constraint === constraint;
}

/** One statement on any pooled connection, within one deadline; failures become StoreUnavailableError. */
export async function query<R extends pg.QueryResultRow>(pool: pg.Pool, text: string | pg.QueryConfig, values: unknown[] = []): Promise<pg.QueryResult<R>> {
  try {
    return await boundedQuery<R>(pool, typeof text === 'string' ? { text, values } : text, deadlineOf(pool));
  } catch (err) {
    throw storeError(err);
  }
}

/**
 * One statement on any pooled connection by `deadline` (the insert batcher's, which started when
 * the batch was queued); rejects with pg's own error or a timeout (the caller maps it). The
 * connection goes back to the pool after a server error, and is destroyed after any other.
 */
export async function boundedQuery<R extends pg.QueryResultRow>(pool: pg.Pool, config: pg.QueryConfig, deadline: number): Promise<pg.QueryResult<R>> {
  const client = await acquire(pool, deadline);
  let statement: pg.QueryConfig;
  try {
    statement = bounded(config, deadline);
  } catch (err) {
    client.release(); // the deadline passed as the connection came: nothing was sent on it
    throw err;
  }
  const onError = (): void => {};
  client.on('error', onError);
  let broken: Error | undefined;
  try {
    return await client.query<R>(statement);
  } catch (err) {
    if (!isDatabaseError(err)) broken = err instanceof Error ? err : new Error('query failed');
    throw err;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}

/**
 * One connection of the pool, for several statements; a pool that cannot connect (by `deadline`,
 * when given) is a StoreUnavailableError. A checked-out client that loses its socket emits
 * 'error' (the query in flight rejects too): `onError` swallows that; take it off before release.
 */
export async function checkout(pool: pg.Pool, deadline?: number): Promise<{ client: pg.PoolClient; onError: () => void }> {
  let client: pg.PoolClient;
  try {
    client = deadline === undefined ? await pool.connect() : await acquire(pool, deadline);
  } catch (err) {
    throw storeError(err);
  }
  const onError = (): void => {};
  client.on('error', onError);
  return { client, onError };
}

/**
 * Runs `fn` in one transaction (READ COMMITTED) on one connection: COMMIT when it resolves,
 * ROLLBACK when it throws. A connection that failed (socket, timeout) is destroyed, not rolled
 * back: a timed-out query may still be running on it. The whole transaction has one deadline
 * (deadlineOf): when it passes first, the connection is closed under the statement in flight,
 * which fails; the call fails with code `timeout`.
 */
export async function transaction<T>(pool: pg.Pool, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const deadline = deadlineOf(pool);
  const { client, onError } = await checkout(pool, deadline);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    // A pooled client is a pg.Client; its socket is the only handle on a statement in flight.
    (client as unknown as pg.Client).connection.stream.destroy();
  }, Math.max(1, left(deadline)));
  try {
    await client.query('BEGIN');
    const out = await fn(client);
    await client.query('COMMIT');
    clearTimeout(timer);
    client.off('error', onError);
    client.release();
    return out;
  } catch (err) {
    // Failed by the server or by the caller's code, not by the connection: it can be rolled back.
    const own = isDatabaseError(err) || err instanceof DuplicateTokenError || err instanceof TypeError || err instanceof RangeError;
    let broken: Error | undefined = err instanceof Error ? err : new Error('transaction failed');
    if (own && !timedOut) {
      // Within the same deadline (the timer still runs): a server that stops answering now fails it too.
      broken = await client.query('ROLLBACK').then(() => undefined, (e: unknown) => (e instanceof Error ? e : new Error('rollback failed')));
    }
    clearTimeout(timer);
    client.off('error', onError);
    client.release(broken);
    // The statement the timer cut off fails as a closed connection: it is the deadline's timeout.
    throw storeError(timedOut && !own ? deadlineExceeded() : err);
  }
}
