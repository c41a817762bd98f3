/**
 * The PostgreSQL token store (issue 24): today's TokenStore interface (store/types.ts) assembled
 * from one module per concern: tokens.ts, audit.ts, data-keys.ts, idempotency.ts, over one pool
 * (pool.ts) and a schema created or upgraded at connect (schema.ts).
 *
 * Durability: a write resolves after its COMMIT returned, which with PostgreSQL's defaults
 * (fsync on, synchronous_commit on) means its WAL record is on disk.
 */
import type pg from 'pg';
import type { AuditAnchorSigner } from '../../crypto/audit-anchor.js';
import type { AuditEvent, AuditEventInput, AuditFilter, AuditPageResult, StoredAuditHead } from '../audit.js';
import type { IdempotencyClaim, IdempotencyPort, IdempotencySlot } from '../idempotency.js';
import type { InsertOptions, Page, PageResult, StoredToken, TokenFilter, TokenPort, WrappedDataKey, AuditPort, DataKeyPort, Store } from '../types.js';
import { PostgresAudit } from './audit.js';
import { PostgresDataKeys } from './data-keys.js';
import { PostgresIdempotency } from './idempotency.js';
import { createPool, query, type PostgresPoolOptions } from './pool.js';
import { ensureSchema } from './schema.js';
import { PostgresTokens } from './tokens.js';

export { SchemaTooNewError, SCHEMA_VERSION } from './schema.js';
export type { PostgresPoolOptions as PostgresStoreOptions } from './pool.js';

export class PostgresStore implements Store, TokenPort, AuditPort, DataKeyPort, IdempotencyPort {
  readonly kind = 'postgres' as const;
  readonly tokens: TokenPort = this;
  readonly audit: AuditPort = this;
  readonly dataKeys: DataKeyPort = this;
  readonly idempotency: IdempotencyPort = this;
  readonly #tokens: PostgresTokens;
  readonly #audit: PostgresAudit;
  readonly #keys: PostgresDataKeys;
  readonly #idempotency: PostgresIdempotency;
  #closed: Promise<void> | null = null;

  private constructor(readonly pool: pg.Pool) {
    this.#tokens = new PostgresTokens(pool);
    this.#audit = new PostgresAudit(pool);
    this.#keys = new PostgresDataKeys(pool);
    this.#idempotency = new PostgresIdempotency(pool);
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

  insertMany(records: StoredToken[], options?: InsertOptions): Promise<Array<StoredToken | null>> {
    return this.#tokens.insertMany(records, options);
  }
  get(tenantId: string, id: string): Promise<StoredToken | null> {
    return this.#tokens.get(tenantId, id);
  }
  getMany(tenantId: string, ids: string[]): Promise<StoredToken[]> {
    return this.#tokens.getMany(tenantId, ids);
  }
  update(record: StoredToken): Promise<boolean> {
    return this.#tokens.update(record);
  }
  delete(tenantId: string, id: string): Promise<boolean> {
    return this.#tokens.delete(tenantId, id);
  }
  list(tenantId: string, filter: TokenFilter, page: Page): Promise<PageResult> {
    return this.#tokens.list(tenantId, filter, page);
  }
  purgeCvc(now: Date): Promise<number> {
    return this.#tokens.purgeCvc(now);
  }
  listDataKeys(): Promise<WrappedDataKey[]> {
    return this.#keys.list();
  }
  addDataKey(key: WrappedDataKey): Promise<WrappedDataKey[]> {
    return this.#keys.add(key);
  }
  appendAudit(tenantId: string, events: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]> {
    return this.#audit.append(tenantId, events, sign);
  }
  listAudit(tenantId: string, filter: AuditFilter, page: Page): Promise<AuditPageResult> {
    return this.#audit.list(tenantId, filter, page);
  }
  auditRange(tenantId: string, after: string | null, limit: number): Promise<{ items: Array<AuditEvent | null>; next: string | null }> {
    return this.#audit.range(tenantId, after, limit);
  }
  auditHead(tenantId: string): Promise<StoredAuditHead | null> {
    return this.#audit.head(tenantId);
  }
  claimIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<IdempotencyClaim> {
    return this.#idempotency.claim(slot, owner, sealed, ttlMs);
  }
  completeIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<boolean> {
    return this.#idempotency.complete(slot, owner, sealed, ttlMs);
  }
  releaseIdempotencyKey(slot: IdempotencySlot, owner: string): Promise<boolean> {
    return this.#idempotency.release(slot, owner);
  }
  purgeIdempotencyKeys(now: Date): Promise<number> {
    return this.#idempotency.purge(now);
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
