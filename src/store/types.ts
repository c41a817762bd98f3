import type { AuditAnchorSigner } from './audit.js';
import type { AuditEvent, AuditEventInput, AuditFilter, AuditHead, AuditPageResult, StoredAuditHead } from './audit.js';
import type { IdempotencyPort } from './idempotency.js';
import type { ReactorResultPort } from './reactor-results.js';

/**
 * What the stores keep: the records of the four ports (below) and their errors. Implementations
 * never see plaintext: `sealed` and `cvc_sealed` are ciphertext strings, `fingerprint` and
 * `index_hashes` are HMAC digests.
 */
export interface StoredToken {
  tenant_id: string;
  id: string;
  type: string;
  /** Exactly one container today (one per token, as in the hosted service this replaces), e.g. "/pci/high/". */
  container: string;
  /** Ciphertext of the token's data (without the cvc), from crypto/seal. */
  sealed: string;
  /** Ciphertext of a card's cvc; removed by purgeCvc once cvc_expires_at has passed. */
  cvc_sealed: string | null;
  cvc_expires_at: string | null;
  /** Not sensitive: stored and returned as they are. */
  metadata: Record<string, string>;
  /** The expressions, as supplied (returned to clients). */
  search_indexes: string[];
  /** HMACs of the evaluated search indexes (what search matches). */
  index_hashes: string[];
  fingerprint: string | null;
  fingerprint_expression: string | null;
  mask: string | null;
  created_by: string;
  created_at: string;
  modified_by: string | null;
  modified_at: string | null;
  /** ISO 8601; the token is unreadable (treated as missing) after it. */
  expires_at: string | null;
}

/**
 * Which containers a page may show (auth/access.ts searchScope): the first rule whose prefix
 * starts the token's container decides; a container no rule matches is left out.
 */
export interface ScopeRule {
  prefix: string;
  allow: boolean;
}

export interface TokenFilter {
  /** The caller's permission filter, applied inside the query so pages are full; absent: all containers. */
  scope?: readonly ScopeRule[];
  type?: string;
  /** Prefix match on the container ("/pci/" matches "/pci/high/"). */
  container?: string;
  fingerprint?: string;
  /** Every pair must match exactly. */
  metadata?: Record<string, string>;
  /** Every hash must be among the token's index_hashes. */
  index_hashes?: string[];
  /** Only tokens whose ids are in this list. */
  ids?: string[];
}

export interface Page {
  /** 1..100 */
  size: number;
  /** Opaque cursor from a previous page's `next`, or null for the first page. */
  after: string | null;
}

/**
 * A page of the audit log: after the cursor, the first `skip` matching events are passed over
 * (GET /logs?page=N, the original's page numbers). The store skips inside its query, so
 * the page is still full; the cost grows with `skip` (the route bounds it).
 */
export interface AuditPage extends Page {
  skip?: number;
}

export interface PageResult {
  items: StoredToken[];
  /** Cursor of the next page, or null when this page is the last. */
  next: string | null;
}

export interface WrappedDataKey {
  kid: string;
  /** The data key wrapped (encrypted) by the master key. */
  wrapped: string;
  created_at: string;
}

export class DuplicateTokenError extends Error {
  constructor(readonly id: string) {
    super('duplicate token id');
    this.name = 'DuplicateTokenError';
  }
}

// The store failed (connection, I/O): a module of its own, so store/audit.ts can extend it
// without importing this file, which imports store/audit.ts's types.
export { StoreUnavailableError } from './unavailable.js';

export interface InsertOptions {
  /** Per record (same index): deduplicate it (it needs a fingerprint). */
  dedupe?: readonly boolean[];
}

/**
 * The token port: the vault's records.
 * Contract suite: test/store/tokens-contract.ts, run against every backend.
 */
export interface TokenPort {
  /**
   * Writes every record or none (one transaction / one script). Durable when it resolves.
   * Throws DuplicateTokenError when an id already exists in the tenant (nothing written).
   *
   * Deduplication, atomically (`dedupe[i]` true for records[i]): when a live token of the same
   * tenant, type, container and fingerprint exists (the oldest such), or an earlier record of this
   * batch is one, records[i] is not written and that token is returned at index i instead; the
   * check and the write are one step, so N concurrent identical inserts leave one token. Records
   * written answer null.
   */
  insertMany(records: StoredToken[], options?: InsertOptions): Promise<Array<StoredToken | null>>;
  /** Expired tokens (expires_at in the past) are returned as null. */
  get(tenantId: string, id: string): Promise<StoredToken | null>;
  /** Several at once; missing and expired ids are absent from the result. */
  getMany(tenantId: string, ids: string[]): Promise<StoredToken[]>;
  /** Replaces an existing record (same tenant and id); false when it does not exist. */
  update(record: StoredToken): Promise<boolean>;
  delete(tenantId: string, id: string): Promise<boolean>;
  /** Newest first; expired tokens are skipped. InvalidCursorError when `page.after` is not a cursor of this store. */
  list(tenantId: string, filter: TokenFilter, page: Page): Promise<PageResult>;
  /** Clears cvc_sealed of every record whose cvc_expires_at <= now; returns how many. */
  purgeCvc(now: Date): Promise<number>;
}

/**
 * The audit port: the audit trail (store/audit.ts). Contract suite: test/store/audit-contract.ts.
 */
export interface AuditPort {
  /**
   * Appends events of one tenant to its chain, atomically with the chain head and the head's
   * anchor that `sign` computes (crypto/audit-anchor.ts: the store keeps the anchor, never the
   * key); concurrent appends (from any number of processes) still form one chain. Returns the
   * stored events, in order.
   */
  appendAudit(tenantId: string, events: AuditEventInput[], sign: AuditAnchorSigner): Promise<AuditEvent[]>;
  /** Newest first, filtered; `page.after` is a previous page's `next`; then `page.skip` matches are passed over. */
  listAudit(tenantId: string, filter: AuditFilter, page: AuditPage): Promise<AuditPageResult>;
  /**
   * The tenant's events as stored, oldest first, for the chain check: an entry that does not
   * decode is null. `after`: a previous answer's `next` (null: from the start).
   */
  auditRange(tenantId: string, after: string | null, limit: number): Promise<{ items: Array<AuditEvent | null>; next: string | null }>;
  /** The tenant's chain head and its anchor, or null before its first event. */
  auditHead(tenantId: string): Promise<StoredAuditHead | null>;
  /**
   * Anchors a head written before anchoring (`tokenproxy migrate`, the upgrade path; an append
   * refuses such a head): stores `sign`'s anchor for `head` only while it is still the tenant's head
   * and carries none. False, writing nothing, when it is not.
   */
  anchorAuditHead(tenantId: string, head: AuditHead, sign: AuditAnchorSigner): Promise<boolean>;
}

/**
 * The data key port: the key ring's wrapped data keys (crypto/keyring.ts). Contract suite:
 * test/store/data-keys-contract.ts.
 */
export interface DataKeyPort {
  /** The key ring's wrapped data keys, oldest first. */
  listDataKeys(): Promise<WrappedDataKey[]>;
  /** Stores a wrapped data key unless one with this kid exists; returns the ring afterwards. */
  addDataKey(key: WrappedDataKey): Promise<WrappedDataKey[]>;
}

/**
 * The store's identity (store/identity.ts): written once when the store is made, beside the
 * format marker each backend already keeps. `lost_at` is set by a service that found the store
 * emptied under it (a tombstone: the next start names the loss instead of starting a new vault).
 */
export interface StoreMarker {
  id: string;
  created_at: string;
  lost_at?: string;
}

/**
 * The marker port. Contract: test/store/marker-contract.ts (every backend).
 */
export interface MarkerPort {
  /** The store's marker, or null when it holds none. */
  readMarker(): Promise<StoreMarker | null>;
  /** Writes `marker` unless the store holds one already; returns the one it holds afterwards. */
  createMarker(marker: StoreMarker): Promise<StoreMarker>;
  /** Marks the store's marker lost (sets lost_at; writes the marker with it when there is none). */
  markLost(marker: StoreMarker): Promise<void>;
  /** Removes the marker (`tokenproxy init`, beginning a new vault on an emptied store). */
  clearMarker(): Promise<void>;
  /** Whether the store holds any token or audit event (data keys aside). */
  holdsRecords(): Promise<boolean>;
  /**
   * From now on every write checks, in the same atomic step, that the store still carries this
   * marker (Redis: a script runs nothing when its slot lost it); `recheck` is asked when a
   * slot has no marker yet, and answers whether the store as a whole still carries it (it
   * rejects when the store does not answer).
   */
  enforce?(marker: StoreMarker, recheck: () => Promise<boolean>): void;
  /** Calls `fn` whenever a connection to the store dropped (its next use re-checks the marker). */
  onDisconnect?(fn: () => void): void;
  /** Embedded: why the file at the store's path is no longer the file opened (replaced, removed), else null. */
  replaced?(): string | null;
}

export type StoreKind = 'embedded' | 'redis' | 'postgres';

/**
 * A backend's on-disk (or in-RAM) format upgrade, run by `tokenproxy migrate`
 * (src/commands/migrate.ts) through `Store.migrator()`. Resumable: every step commits its progress in
 * the store itself, so a migration killed with -9 goes on from where it stood on the next run.
 * Records keep their ciphertext as it is (nothing is decrypted to migrate).
 */
export interface FormatMigrator {
  /** The format the store holds now, the one this code writes, and how many records are left to convert. */
  status(): Promise<{ from: number; to: number; pending: number; total: number }>;
  /** Converts up to `batch` records in one atomic step; `done` once nothing is left (and the store says `to`). */
  step(batch: number): Promise<{ converted: number; done: boolean }>;
}

/**
 * Raised by a store's connect when it holds a format older than this code reads and the upgrade
 * is not one to run at start-up: the message names both versions and the command.
 */
export class StoreFormatError extends Error {
  constructor(readonly found: number, readonly wanted: number, detail: string) {
    super(`the store holds format ${found}, this version reads format ${wanted}: ${detail}`);
    this.name = 'StoreFormatError';
  }
}

/**
 * One backend (src/store/embedded/, redis/, postgres/): its four ports over one connection, and
 * the connection's lifecycle. Consumers take only the port they need: the vault
 * and the detokenizer `tokens`, the audit trail `audit`, the key ring `dataKeys`, the idempotency
 * stage `idempotency`; only wiring (server.ts, crypto/open.ts, the CLI) holds the whole store.
 * Every port of every backend throws StoreUnavailableError when the store fails (connection,
 * I/O; messages never carry values); store/service-errors.ts turns that into 503
 * store_unavailable for the request path, in one place.
 */
export interface Store {
  readonly kind: StoreKind;
  readonly tokens: TokenPort;
  readonly audit: AuditPort;
  readonly dataKeys: DataKeyPort;
  /** Idempotency entries (SVC-IDEMPOTENCY-KEY): store/idempotency.ts. */
  readonly idempotency: IdempotencyPort;
  /** Asynchronous reactor calls' results: store/reactor-results.ts. */
  readonly reactorResults: ReactorResultPort;
  /** The store's identity marker: store/identity.ts. */
  readonly marker: MarkerPort;
  /**
   * The format upgrade of this backend, for `tokenproxy migrate`; absent when the backend has none
   * to run outside start-up. A store opened for migration (its connect's `forMigration` option)
   * skips the format check that a service start makes.
   */
  migrator?(): FormatMigrator;
  /** Resolves when the store answers; rejects with StoreUnavailableError when it does not. */
  ping(): Promise<void>;
  close(): Promise<void>;
  /**
   * Redis, opened by a service: its primaries' persistence as read at start, and whether the
   * config accepts losing writes (store/redis/durability.ts); /readyz and a gauge report it.
   */
  readonly durability?: StoreDurability;
}

/** The weakest of a Redis store's primaries: `unknown` where Redis would not say. */
export interface StoreDurability {
  appendonly: 'yes' | 'no' | 'unknown';
  appendfsync: 'always' | 'everysec' | 'no' | 'unknown';
  /** `store.durability: accept_loss`. */
  accepted_loss: boolean;
}

/**
 * Raised by a Redis store's connect when production mode refuses its persistence (no
 * append-only file, or none that could be read) and the config does not accept the loss: the
 * message says what was found and the ways out.
 */
export class StoreDurabilityError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StoreDurabilityError';
  }
}
