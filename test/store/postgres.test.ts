/**
 * PostgresStore (issue 24) on a real PostgreSQL: the store contract (tokens, idempotency, audit),
 * the schema created once by many instances starting at once, a newer schema refused, the factory,
 * and a database that does not answer failing fast.
 */
import t from 'tap';
import type { Test } from 'tap';
import pg from 'pg';
import { postgresForFile, type PostgresServer } from '../helpers/postgres.js';
import { runContract, makeRecord, TENANT_A } from './contract.js';
import { PostgresStore, SchemaTooNewError, SCHEMA_VERSION, type PostgresStoreOptions } from '../../src/store/postgres/index.js';
import { createStore } from '../../src/store/factory.js';
import { buildConfig } from '../../src/config/load.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { StoreFormatError, StoreUnavailableError } from '../../src/store/types.js';
import { MIGRATIONS } from '../../src/store/postgres/schema.js';
import { AUDIT_TENANT, auditInput, checkChain, SIGN } from './audit-contract.js';
import { randomUUID } from 'node:crypto';
import { inspect } from 'node:util';
import { createLogger } from '../../src/log.js';
import { ServiceError, toProblem } from '../../src/errors.js';
import { safeError } from '../../src/http/pipeline.js';
import { toServiceError } from '../../src/store/service-errors.js';

const server = await postgresForFile(t);
if (server) {
  const open = async (t: Test, url?: string, opts?: PostgresStoreOptions): Promise<PostgresStore> => {
    const store = await PostgresStore.connect(opts ?? { url: url ?? (await server.database(t)).url });
    t.teardown(() => store.close());
    return store;
  };

  runContract(t, (t) => open(t));

  registerSchemaTests(t, server, open);

  t.test('four instances on one database: concurrent audit appends form one chain, concurrent identical creates leave one token', async (t) => {
    const db = await server.database(t);
    const stores = await Promise.all(Array.from({ length: 4 }, () => open(t, db.url)));
    // Each instance batches its own appends per tenant; across instances only the head row lock
    // orders them. The tenant's first append races too (its head row does not exist yet).
    const n = 80;
    const appended = await Promise.all(Array.from({ length: n }, (_, i) => stores[i % 4]!.audit.appendAudit(AUDIT_TENANT, [auditInput({ request_id: `r${i}` })], SIGN)));
    t.same(appended.flat().map((e) => e.seq).sort((a, b) => a - b), Array.from({ length: n }, (_, i) => i + 1), 'every seq once');
    t.same(await checkChain(stores[0]!, AUDIT_TENANT), { ok: true, events: n, unanchored: false }, 'one chain, anchored head');
    const results = await Promise.all(Array.from({ length: 24 }, (_, i) => stores[i % 4]!.tokens.insertMany([makeRecord({ fingerprint: 'race' })], { dedupe: [true] })));
    t.equal(results.filter((r) => r[0] === null).length, 1, 'one insert wrote');
    const stored = (await stores[1]!.tokens.list(TENANT_A, { fingerprint: 'race' }, { size: 100, after: null })).items.map((r) => r.id);
    t.equal(stored.length, 1, 'one token');
    t.same(new Set(results.map((r) => r[0]?.id ?? stored[0])), new Set(stored), 'every other insert got that token');
  });

  t.test('a PostgreSQL error never carries the values it quotes: not the error, its cause, a log line or a problem body', async (t) => {
    const db = await server.database(t);
    const store = await open(t, db.url);
    // A unique index of the operator's own (not tokens_tenant_id): its violation is a store failure,
    // and pg's detail quotes the key: "Key ((metadata ->> 'ref'::text))=(<marker>) already exists."
    const client = new pg.Client(db.url);
    await client.connect();
    t.teardown(() => client.end());
    await client.query("CREATE UNIQUE INDEX tokens_by_ref ON tokenproxy.tokens ((metadata->>'ref'))");
    const marker = `ref-${randomUUID()}`;
    await store.tokens.insertMany([makeRecord({ metadata: { ref: marker } })]);
    const err = await store.tokens.insertMany([makeRecord({ metadata: { ref: marker } })]).then(() => null, (e: unknown) => e);
    t.ok(err instanceof StoreUnavailableError, 'StoreUnavailableError');
    t.match((err as Error).message, /\(23505\)/, 'naming the SQLSTATE');
    const cause = (err as Error).cause;
    t.ok(cause instanceof pg.DatabaseError, 'the cause is still a pg DatabaseError');
    t.match(cause, { code: '23505', constraint: 'tokens_by_ref' }, 'with its SQLSTATE and constraint');
    t.notMatch(inspect(err, { depth: 10, showHidden: true }), marker, 'the error and its cause chain, as any logger would print them');
    const lines: string[] = [];
    const log = createLogger('info', { write: (line: string) => void lines.push(line) });
    log.warn({ err }, 'store failed');
    const mapped = toServiceError(err);
    log.warn({ code: (mapped as ServiceError).code, cause: safeError((mapped as ServiceError).cause) }, 'request failed');
    t.equal(lines.length, 2, 'both lines logged');
    for (const line of lines) t.notMatch(line, marker, 'the log line');
    const body = toProblem(mapped);
    t.match(body, { status: 503, code: 'store_unavailable' });
    t.notMatch(JSON.stringify(body), marker, 'the problem body');
  });

  t.test('factory builds a connected PostgreSQL store', async (t) => {
    const db = await server.database(t);
    const store = await createStore({ kind: 'postgres', path: '', key_prefix: '', url: db.url, pool_size: 2 });
    t.teardown(() => store.close());
    t.equal(store.kind, 'postgres');
    await store.ping();
    // A statement, a lock wait and an idle transaction are bounded on the server too (pool.ts).
    const pool = (store as PostgresStore).pool;
    const setting = async (name: string) => Object.values((await pool.query(`SHOW ${name}`)).rows[0] as Record<string, string>)[0];
    t.same([await setting('statement_timeout'), await setting('lock_timeout'), await setting('idle_in_transaction_session_timeout')], ['5s', '5s', '10s']);
    const r = makeRecord();
    await store.tokens.insertMany([r]);
    t.same(await store.tokens.get(TENANT_A, r.id), r);
  });

  t.test('the password: from store.password, a { file }, or TOKENPROXY_STORE_PASSWORD, never in a message', { skip: server.checksPasswords ? false : 'the server given by TOKENPROXY_TEST_PG_URL lets a wrong password in (trust)' }, async (t) => {
    const db = new URL((await server.database(t)).url);
    const password = decodeURIComponent(db.password);
    db.password = '';
    const bare = db.toString();
    const wrong = await PostgresStore.connect({ url: bare, password: 'not-the-password' }).then(() => null, (e: unknown) => e);
    t.ok(wrong instanceof StoreUnavailableError, 'a wrong password: StoreUnavailableError');
    t.match(wrong instanceof Error ? wrong.message : '', /\(28P01\)/, 'naming the SQLSTATE (invalid_password)');
    t.notMatch(wrong instanceof Error ? wrong.message : '', /not-the-password/);
    const direct = await open(t, undefined, { url: bare, password });
    await direct.ping();
    t.pass('store.password as a string');
    const dir = mkdtempSync(join(tmpdir(), 'tp-pgpw-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'pw'), `${password}\n`);
    await (await open(t, undefined, { url: bare, password: { file: join(dir, 'pw') } })).ping();
    t.pass('store.password as { file } (trailing newline dropped)');
    const config = buildConfig({ store: { kind: 'postgres', url: bare, password: 'not-the-password' } }, { env: { TOKENPROXY_STORE_PASSWORD: password } });
    const fromEnv = await createStore(config.store);
    t.teardown(() => fromEnv.close());
    await fromEnv.ping();
    t.pass('TOKENPROXY_STORE_PASSWORD wins over store.password');
  });

  t.test('connecting to nothing fails fast with StoreUnavailableError, naming no secret', async (t) => {
    const started = Date.now();
    const err = await PostgresStore.connect({ url: 'postgres://tp:s3cretpw@127.0.0.1:1/x' }).then(() => null, (e: unknown) => e);
    t.ok(err instanceof StoreUnavailableError, 'StoreUnavailableError');
    t.notMatch(err instanceof Error ? err.message : '', /s3cretpw/, 'no password in the message');
    t.ok(Date.now() - started < 6000, `failed in ${Date.now() - started} ms`);
  });
}

function registerSchemaTests(t: Test, server: PostgresServer, open: (t: Test, url?: string) => Promise<PostgresStore>): void {
  t.test('many instances starting at once create the schema once', async (t) => {
    const db = await server.database(t);
    const stores = await Promise.all(Array.from({ length: 8 }, () => open(t, db.url)));
    const client = new pg.Client(db.url);
    await client.connect();
    t.teardown(() => client.end());
    const v = await client.query('SELECT version FROM tokenproxy.schema_version');
    t.same(v.rows, [{ version: SCHEMA_VERSION }], 'one version row');
    const r = makeRecord();
    await stores[0]!.tokens.insertMany([r]);
    t.same(await stores[7]!.tokens.get(TENANT_A, r.id), r, 'every instance sees the same tables');
  });

  t.test('a version-1 database (the pre-release format, issue 24 item 2): refused while it holds tokens, upgraded when it holds none', async (t) => {
    const v1 = async (withToken: boolean) => {
      const db = await server.database(t);
      const client = new pg.Client(db.url);
      await client.connect();
      t.teardown(() => client.end());
      await client.query('CREATE SCHEMA tokenproxy');
      await client.query('CREATE TABLE tokenproxy.schema_version (one boolean PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL)');
      await client.query(MIGRATIONS[0]!);
      await client.query('INSERT INTO tokenproxy.schema_version (version) VALUES (1)');
      await client.query("INSERT INTO tokenproxy.data_keys (kid, wrapped, created_at) VALUES ('k1', 'w1.x.y', '2026-01-01T00:00:00.000Z')");
      if (withToken) {
        await client.query(`INSERT INTO tokenproxy.tokens (tenant_id, id, type, container, sealed, metadata, search_indexes, index_hashes, created_by, created_at)
          VALUES ($1, 'old-1', 'token', '/general/', 'v1.k1.aaaa.bbbb', '{}', '{}', '{}', 'app', '2026-01-01T00:00:00.000Z')`, [TENANT_A]);
      }
      return { db, client };
    };
    const full = await v1(true);
    const err = await PostgresStore.connect({ url: full.db.url }).then(() => null, (e: unknown) => e);
    t.ok(err instanceof StoreFormatError, `StoreFormatError (${String(err)})`);
    t.match(err instanceof Error ? err.message : '', new RegExp(`format 1, this version reads format ${SCHEMA_VERSION}: .*pre-release`), 'names both versions');
    t.same((await full.client.query('SELECT version FROM tokenproxy.schema_version')).rows, [{ version: 1 }], 'nothing changed');
    t.equal((await full.client.query('SELECT count(*)::int AS n FROM tokenproxy.tokens')).rows[0].n, 1, 'the token is still there');

    const empty = await v1(false);
    const store = await open(t, empty.db.url);
    t.same((await empty.client.query('SELECT version FROM tokenproxy.schema_version')).rows, [{ version: SCHEMA_VERSION }], 'upgraded');
    t.same((await store.dataKeys.listDataKeys()).map((k) => k.kid), ['k1'], 'the data keys kept');
    const r = makeRecord();
    await store.tokens.insertMany([r]);
    t.same(await store.tokens.get(TENANT_A, r.id), r, 'tokens written and read in the new format');
  });

  t.test('a version-2 database (issue 28): upgraded at start by adding the reactor results table, its tokens untouched', async (t) => {
    const db = await server.database(t);
    const before = await PostgresStore.connect({ url: db.url });
    const r = makeRecord();
    await before.tokens.insertMany([r]);
    await before.close();
    const client = new pg.Client(db.url);
    await client.connect();
    t.teardown(() => client.end());
    // What a database of the previous release holds: version 2, no reactor results table.
    await client.query('DROP TABLE tokenproxy.reactor_results');
    await client.query('UPDATE tokenproxy.schema_version SET version = 2');
    const store = await open(t, db.url);
    t.same((await client.query('SELECT version FROM tokenproxy.schema_version')).rows, [{ version: SCHEMA_VERSION }], 'upgraded');
    t.same(await store.tokens.get(TENANT_A, r.id), r, 'the token reads as before');
    await store.reactorResults.putReactorResult({ tenant_id: TENANT_A, id: 'r1', sealed: 's', expires_ms: Date.now() + 60_000 });
    t.equal((await store.reactorResults.getReactorResult(TENANT_A, 'r1'))?.sealed, 's', 'the new table works');
  });

  t.test('a schema newer than the code: refused, naming both versions', async (t) => {
    const db = await server.database(t);
    await open(t, db.url);
    const client = new pg.Client(db.url);
    await client.connect();
    t.teardown(() => client.end());
    await client.query('UPDATE tokenproxy.schema_version SET version = $1', [SCHEMA_VERSION + 1]);
    const err = await PostgresStore.connect({ url: db.url }).then(() => null, (e: unknown) => e);
    t.ok(err instanceof SchemaTooNewError, 'SchemaTooNewError');
    t.equal(err instanceof SchemaTooNewError && err.code, 'store_schema_too_new');
    t.match(err instanceof Error ? err.message : '', new RegExp(`version ${SCHEMA_VERSION + 1}.*version ${SCHEMA_VERSION}`));
  });
}
