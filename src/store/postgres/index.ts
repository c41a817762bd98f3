/**
 * The PostgreSQL store: its four ports (store/types.ts), one module
 * each: tokens.ts, audit.ts, data-keys.ts, idempotency.ts, reactor-results.ts, over one pool (pool.ts) and a schema
 * created or upgraded at connect (schema.ts).
 *
 * Durability: a write resolves after its COMMIT returned, which with PostgreSQL's defaults
 * (fsync on, synchronous_commit on) means its WAL record is on disk.
 */
import type pg from 'pg';
import type { Store } from '../types.js';
import { PostgresAudit } from './audit.js';
import { PostgresDataKeys } from './data-keys.js';
import { PostgresIdempotency } from './idempotency.js';
import { PostgresMarker } from './marker.js';
import { createPool, query, type PostgresPoolOptions } from './pool.js';
import { PostgresReactorResults } from './reactor-results.js';
import { ensureSchema } from './schema.js';
import { PostgresTokens } from './tokens.js';

export { SchemaTooNewError, SCHEMA_VERSION } from './schema.js';
export type { PostgresPoolOptions as PostgresStoreOptions } from './pool.js';

export class PostgresStore implements Store {
  readonly kind = 'postgres' as const;
  readonly tokens: PostgresTokens;
  readonly audit: PostgresAudit;
  readonly dataKeys: PostgresDataKeys;
  readonly idempotency: PostgresIdempotency;
  readonly reactorResults: PostgresReactorResults;
  readonly marker: PostgresMarker;
  #closed: Promise<void> | null = null;

  private constructor(readonly pool: pg.Pool) {
    this.tokens = new PostgresTokens(pool);
    this.audit = new PostgresAudit(pool);
    this.dataKeys = new PostgresDataKeys(pool);
    this.idempotency = new PostgresIdempotency(pool);
    this.reactorResults = new PostgresReactorResults(pool);
    this.marker = new PostgresMarker(pool);
  }

  /** Connects and creates or upgrades the schema; StoreUnavailableError when the database does not answer. */
  static async connect(opts: PostgresPoolOptions): Promise<PostgresStore> {
    const pool = createPool(opts);
    try {
      await ensureSchema(pool);
    } catch (err) {
      await pool.end().catch(() => {});
      throw err;
    }
    return new PostgresStore(pool);
  }

  async ping(): Promise<void> {
    await query(this.pool, 'SELECT 1');
  }

  /** Waits for the queries in flight, then closes every connection. */
  close(): Promise<void> {
    this.#closed ??= this.pool.end().catch(() => {});
    return this.#closed;
  }
}
