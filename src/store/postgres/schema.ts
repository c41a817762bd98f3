/**
 * The PostgreSQL store's schema and its versions. Everything lives in the database
 * schema `tokenproxy` (so it never meets the application's own tables); `tokenproxy.schema_version`
 * holds the one version number.
 *
 * Start-up: under a session advisory lock (many instances starting at once create the schema
 * once; the others wait, then find it current), read the version; newer than this code knows:
 * refuse to start (SchemaTooNewError, naming both); older: run the missing migrations in one
 * transaction with the version update.
 *
 * Layout: columns hold what is filtered on and every field of a record (no JSON that repeats a
 * column); `metadata` is jsonb and `index_hashes` a text[] (GIN indexes: `@>` matches every pair
 * or hash); the audit chain's hashes are bytea. Version 2 is the compact token format:
 * binary ciphertext, digests and ids, numbers for repeated names, only the indexes a query
 * reads (see its migration below).
 */
import type pg from 'pg';
import { StoreFormatError } from '../types.js';
import { checkout, storeError } from './pool.js';

export const SCHEMA_VERSION = 3;

/** Any bigint: what pg_advisory_lock serializes start-ups on (0x746f6b656e70726f, "tokenpro" in ASCII). */
const MIGRATION_LOCK = '8390042714203255407';

/** How long a start-up waits for the migration lock, and a migration may run. */
const MIGRATION_TIMEOUT_MS = 600_000;

/** A statement with pg's per-query query_timeout (client.js reads it; @types/pg does not list it). */
function slow(text: string): pg.QueryConfig {
  const config: pg.QueryConfig & { query_timeout: number } = { text, query_timeout: MIGRATION_TIMEOUT_MS };
  return config;
}

/** Migration to version N is MIGRATIONS[N - 1]. */
export const MIGRATIONS: readonly string[] = [
  `
CREATE TABLE tokenproxy.tokens (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant_id text NOT NULL, id text NOT NULL, type text NOT NULL, container text NOT NULL,
  sealed text NOT NULL, cvc_sealed text, cvc_expires_at text, cvc_expires_ms bigint,
  metadata jsonb NOT NULL, search_indexes text[] NOT NULL, index_hashes text[] NOT NULL,
  fingerprint text, fingerprint_expression text, mask text,
  created_by text NOT NULL, created_at text NOT NULL, modified_by text, modified_at text,
  expires_at text, expires_ms bigint,
  -- true: this token holds its tenant's deduplication slot for (type, container, fingerprint)
  dedupe_slot boolean NOT NULL DEFAULT false,
  CONSTRAINT tokens_tenant_id UNIQUE (tenant_id, id)
);
CREATE INDEX tokens_by_tenant ON tokenproxy.tokens (tenant_id, seq);
CREATE INDEX tokens_by_fingerprint ON tokenproxy.tokens (tenant_id, fingerprint, seq) WHERE fingerprint IS NOT NULL;
CREATE UNIQUE INDEX tokens_dedupe ON tokenproxy.tokens (tenant_id, type, container, fingerprint) WHERE dedupe_slot;
CREATE INDEX tokens_cvc_due ON tokenproxy.tokens (cvc_expires_ms) WHERE cvc_sealed IS NOT NULL;
CREATE INDEX tokens_metadata ON tokenproxy.tokens USING gin (metadata jsonb_path_ops);
CREATE INDEX tokens_index_hashes ON tokenproxy.tokens USING gin (index_hashes);

CREATE TABLE tokenproxy.data_keys (
  ord bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  kid text NOT NULL UNIQUE, wrapped text NOT NULL, created_at text NOT NULL
);

CREATE TABLE tokenproxy.idempotency_keys (
  tenant_id text NOT NULL, key text NOT NULL, owner text NOT NULL,
  state text NOT NULL CHECK (state IN ('in_flight', 'done')), sealed text NOT NULL, expires_ms bigint NOT NULL,
  PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_keys_by_expiry ON tokenproxy.idempotency_keys (expires_ms);

CREATE TABLE tokenproxy.audit_events (
  tenant_id text NOT NULL, seq bigint NOT NULL, prev_hash bytea NOT NULL,
  application_id text NOT NULL, action text NOT NULL, token_ids text[] NOT NULL,
  destination text, request_id text NOT NULL, created_at text NOT NULL, created_ms bigint NOT NULL,
  PRIMARY KEY (tenant_id, seq)
);
-- seq 0 with the genesis hash: a tenant with no event yet (the row exists to be locked)
CREATE TABLE tokenproxy.audit_heads (
  tenant_id text PRIMARY KEY, seq bigint NOT NULL, hash bytea NOT NULL, anchor text
);`,
  // 2: the compact token format. Version 1 was a
  // pre-release of this store: a database holding its tokens is refused (checkUpgradable), an
  // empty one is upgraded here. Measured with 20,000 tokens through /tokenize (bodies of 50 cards
  // + 50 strings): 856 bytes a token in version 1.
  `
DROP TABLE tokenproxy.tokens;
CREATE TABLE tokenproxy.names (
  no integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name text NOT NULL CONSTRAINT names_name UNIQUE
);
CREATE TABLE tokenproxy.tokens (
  -- fixed-width columns first, widest first: no alignment padding between them
  seq bigint GENERATED ALWAYS AS IDENTITY, created_ms bigint NOT NULL, cvc_expires_ms bigint, expires_ms bigint, modified_ms bigint,
  tenant integer NOT NULL, created_by integer NOT NULL, fingerprint_expression integer, mask integer, modified_by integer,
  -- the id: a uuid as the service makes them, else the client's own id as text
  id uuid, custom_id text,
  -- true: this token holds its tenant's deduplication slot for (type, container, fingerprint)
  dedupe_slot boolean NOT NULL DEFAULT false,
  type text NOT NULL, container text NOT NULL,
  sealed bytea NOT NULL, cvc_sealed bytea, fingerprint bytea,
  -- null when empty (no JSON or array for nothing)
  metadata jsonb, search_indexes text[], index_hashes bytea[],
  -- a time as given when toISOString() would not write it back (else null)
  created_text text, modified_text text, expires_text text, cvc_expires_text text,
  -- appended in seq order per tenant: full pages (fillfactor 100) where the default leaves 10% free
  CONSTRAINT tokens_pkey PRIMARY KEY (tenant, seq) WITH (fillfactor = 100),
  CONSTRAINT tokens_one_id CHECK ((id IS NULL) <> (custom_id IS NULL))
);
CREATE UNIQUE INDEX tokens_tenant_id ON tokenproxy.tokens (tenant, id) WHERE id IS NOT NULL;
CREATE UNIQUE INDEX tokens_tenant_custom_id ON tokenproxy.tokens (tenant, custom_id) WHERE custom_id IS NOT NULL;
CREATE INDEX tokens_by_fingerprint ON tokenproxy.tokens USING hash (fingerprint) WITH (fillfactor = 100) WHERE fingerprint IS NOT NULL;
CREATE UNIQUE INDEX tokens_dedupe ON tokenproxy.tokens (tenant, type, container, fingerprint) WHERE dedupe_slot;
CREATE INDEX tokens_cvc_due ON tokenproxy.tokens (cvc_expires_ms) WHERE cvc_sealed IS NOT NULL;
CREATE INDEX tokens_metadata ON tokenproxy.tokens USING gin (metadata jsonb_path_ops) WHERE metadata IS NOT NULL;
CREATE INDEX tokens_index_hashes ON tokenproxy.tokens USING gin (index_hashes) WHERE index_hashes IS NOT NULL;`,
  // 3: asynchronous reactor results: a new table only, so a
  // version 2 database upgrades at start without touching its tokens.
  `
CREATE TABLE tokenproxy.reactor_results (
  expires_ms bigint NOT NULL, tenant_id text NOT NULL, id text NOT NULL, sealed text NOT NULL,
  PRIMARY KEY (tenant_id, id)
);
CREATE INDEX reactor_results_by_expiry ON tokenproxy.reactor_results (expires_ms);`,
];

/**
 * Version 1 (a pre-release of the PostgreSQL store) holding tokens: its rows are not converted
 * (no release wrote them), so the start is refused naming both versions, before anything changes.
 */
async function checkUpgradable(client: pg.PoolClient, found: number): Promise<void> {
  if (found !== 1) return;
  const r = await client.query<{ any: boolean }>('SELECT EXISTS (SELECT 1 FROM tokenproxy.tokens) AS any');
  if (r.rows[0]?.any) {
    throw new StoreFormatError(found, SCHEMA_VERSION,
      'the database holds tokens of a pre-release of the PostgreSQL store, which this version does not convert; ' +
        'copy them to a new database with tokenproxy store copy of the build that wrote them, or start on an empty database');
  }
}

/** The database holds a schema newer than this code: it refuses to start (an older tokenproxy against a newer database). */
export class SchemaTooNewError extends Error {
  readonly code = 'store_schema_too_new';
  constructor(readonly found: number, readonly known: number) {
    super(`the PostgreSQL store's schema is version ${found}, newer than this tokenproxy knows (version ${known}): run a tokenproxy release that knows version ${found}`);
    this.name = 'SchemaTooNewError';
  }
}

/** Creates or upgrades the schema; returns the version found before (0: none). */
export async function ensureSchema(pool: pg.Pool): Promise<number> {
  const { client, onError } = await checkout(pool);
  let failed: Error | undefined;
  try {
    // Waiting for another instance's migration, and a migration itself, may take longer than one
    // request's timeouts (the server's statement_timeout, pg's client-side query_timeout).
    await client.query('SET statement_timeout = 0');
    await client.query(slow(`SELECT pg_advisory_lock(${MIGRATION_LOCK})`));
    try {
      await client.query('CREATE SCHEMA IF NOT EXISTS tokenproxy');
      await client.query('CREATE TABLE IF NOT EXISTS tokenproxy.schema_version (one boolean PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL)');
      // The store marker (marker.ts): a table without a version of its own.
      await client.query('CREATE TABLE IF NOT EXISTS tokenproxy.store_marker (one boolean PRIMARY KEY DEFAULT true CHECK (one), id text NOT NULL, created_at text NOT NULL, lost_at text)');
      const found = Number((await client.query<{ version: number }>('SELECT version FROM tokenproxy.schema_version')).rows[0]?.version ?? 0);
      if (found > SCHEMA_VERSION) throw new SchemaTooNewError(found, SCHEMA_VERSION);
      if (found < SCHEMA_VERSION) {
        await checkUpgradable(client, found);
        await client.query('BEGIN');
        try {
          for (let v = found; v < SCHEMA_VERSION; v++) await client.query(slow(MIGRATIONS[v]!));
          await client.query(
            'INSERT INTO tokenproxy.schema_version (version) VALUES ($1) ON CONFLICT (one) DO UPDATE SET version = excluded.version',
            [SCHEMA_VERSION],
          );
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK').catch(() => {});
          throw err;
        }
      }
      return found;
    } finally {
      await client.query(`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`).catch(() => {});
    }
  } catch (err) {
    if (err instanceof SchemaTooNewError || err instanceof StoreFormatError) throw err;
    failed = err instanceof Error ? err : new Error('schema');
    throw storeError(err);
  } finally {
    client.off('error', onError);
    // Released with an error: destroyed (its session settings and lock go with it).
    client.release(failed ?? new Error('migration connection is not reused'));
  }
}
