/**
 * Rate-limit counters in PostgreSQL: rate-limiter-flexible's
 * RateLimiterPostgres on the token store's own pool, so several instances need PostgreSQL and
 * nothing else.
 *
 * - One table for every limiter, `tokenproxy.<rate_limits.table>`, created here once, at start-up (the
 *   limiters are built with `tableCreated: true`; left to them, each would run its own CREATE
 *   TABLE and, keyed by its prefix, one table per rule). Rows are keyed
 *   `<key_prefix><rule>:{<tenant>}:<counter>`, as on Redis. `key text`, not the library's
 *   varchar(255): a long key_prefix must not turn every check into a store failure.
 * - UNLOGGED: a counter update writes no WAL, so a check costs no fsync of its own. The price: a
 *   crash of PostgreSQL (not a clean restart) empties the table, and standbys do not have it;
 *   limits restart from zero then, as on a Redis without persistence.
 * - Each update is one `INSERT … ON CONFLICT DO UPDATE … RETURNING` on one row: atomic, so
 *   instances together admit a limit exactly once. Windows end at `expire`, milliseconds of the
 *   clock of the instance that opened them: keep the instances' clocks in sync (NTP).
 * - Expired rows are deleted by one sweep per service every 5 minutes (the library's own sweep,
 *   off here, runs one timer per limiter, each over the whole table).
 * - Failures: the library rejects with pg's error. It leaves here as "PostgreSQL <code>" (the
 *   SQLSTATE or socket error code), since pg's messages can quote values of a statement.
 */
import pg from 'pg';
import { RateLimiterPostgres, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { errorCode } from '../store/postgres/pool.js';

/** The schema of the token store's tables (src/store/postgres/schema.ts creates it at connect). */
const SCHEMA = 'tokenproxy';
const SWEEP_EVERY_MS = 5 * 60_000;

type Limiter = Pick<RateLimiterAbstract, 'consume'>;

export class PostgresCounters {
  readonly #pool: pg.Pool;
  readonly #table: string;
  #created = false;
  #creating: Promise<void> | undefined;
  readonly #sweep: NodeJS.Timeout;

  constructor(pool: pg.Pool, table: string) {
    this.#pool = pool;
    this.#table = table;
    this.#sweep = setInterval(() => void this.sweep(), SWEEP_EVERY_MS);
    this.#sweep.unref();
  }

  /** The table is known to exist (a check need not wait for ensureTable). */
  get ready(): boolean {
    return this.#created;
  }

  /**
   * Creates the table if missing; one attempt at a time, and a failed one is tried again by the
   * next check (PostgreSQL may be down at the first check and back later).
   */
  ensureTable(): Promise<void> {
    if (this.#created) return Promise.resolve();
    this.#creating ??= this.#create().then(
      () => {
        this.#created = true;
      },
      (err: unknown) => {
        this.#creating = undefined;
        throw new Error(`PostgreSQL ${errorCode(err)} (creating the rate-limit table)`);
      },
    );
    return this.#creating;
  }

  /**
   * CREATE … IF NOT EXISTS alone is not safe for instances starting at once: two can both see no
   * table and collide on the catalog (23505 on pg_type, or 42P07). A transaction-scoped advisory
   * lock on the table's name makes them take turns; the second finds the table.
   */
  async #create(): Promise<void> {
    const client = await this.#pool.connect();
    let broken = false;
    try {
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`${SCHEMA}.${this.#table}`]);
      await client.query(`CREATE UNLOGGED TABLE IF NOT EXISTS ${SCHEMA}.${this.#table} (key text PRIMARY KEY, points integer NOT NULL DEFAULT 0, expire bigint) WITH (fillfactor = 80)`);
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {
        broken = true;
      });
      throw err;
    } finally {
      client.release(broken);
    }
  }

  /** A limiter counting in the table; its store failures reject with an Error naming only the code. */
  limiter(opts: { keyPrefix: string; points: number; duration: number; blockDuration: number }): Limiter {
    const inner = new RateLimiterPostgres({
      ...opts,
      storeClient: this.#pool,
      storeType: 'pool',
      schemaName: SCHEMA,
      tableName: this.#table,
      tableCreated: true,
      clearExpiredByTimeout: false,
    });
    return {
      consume: (key, points) =>
        inner.consume(key, points).catch((e: unknown) => {
          throw e instanceof RateLimiterRes ? e : new Error(`PostgreSQL ${errorCode(e)}`);
        }),
    };
  }

  /** Deletes expired rows (an expired row counts as absent anyway: this only bounds the table). */
  async sweep(): Promise<number> {
    if (!this.#created) return 0;
    const r = await this.#pool.query(`DELETE FROM ${SCHEMA}.${this.#table} WHERE expire < $1`, [Date.now()]).catch(() => null);
    return r?.rowCount ?? 0;
  }

  close(): void {
    clearInterval(this.#sweep);
  }
}
