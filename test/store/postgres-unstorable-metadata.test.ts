/**
 * Metadata that PostgreSQL's jsonb cannot hold (U+0000, lone UTF-16 surrogates), as an embedded
 * store written before the vault refused it may hand over to `store copy`: the PostgreSQL store
 * keeps it losslessly, and reads, updates and metadata filters answer as the embedded store does.
 */
import t from 'tap';
import type { Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { postgresForFile } from '../helpers/postgres.js';
import { makeRecord, TENANT_A } from './contract.js';
import { PostgresStore } from '../../src/store/postgres/index.js';
import { EmbeddedStore } from '../../src/store/embedded/index.js';
import { SQLITE_PACKAGE } from '../../src/store/embedded/sqlite.js';
import type { Store, StoredToken } from '../../src/store/types.js';

/** Own members in a fixed order: the stores need not keep the order they were given. */
const sorted = (m: Record<string, string>): Array<[string, string]> => Object.entries(m).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

const PROTO = JSON.parse('{"__proto__":"p\\u0000"}') as Record<string, string>;
const METADATA: Array<Record<string, string>> = [
  { plain: 'x' },
  { note: 'a\u0000b', plain: 'x' },
  { 'k\u0000': 'v', plain: 'x' },
  { s: '\ud800', lo: 'l\udc00', plain: 'y' },
  // Text that reads like an escape, with and without text jsonb refuses beside it.
  { back: 'a\\u0000b', plain: 'x' },
  { back: 'a\\u0000b', other: '\\\u0000\\', plain: 'y' },
  { ...PROTO, plain: 'x' },
  // The key "" (which the vault refuses) beside text jsonb refuses, and alone.
  { '': 'empty', note: 'n\u0000' },
  { '': 'empty', plain: 'y' },
];
const FILTERS: Array<Record<string, string>> = [
  { plain: 'x' }, { plain: 'y' }, { note: 'a\u0000b' }, { note: 'a\u0000b', plain: 'x' }, { 'k\u0000': 'v' }, { s: '\ud800' },
  { lo: 'l\udc00', plain: 'y' }, { back: 'a\\u0000b' }, { other: '\\\u0000\\' }, PROTO, { note: 'a' }, { s: '\ud800', plain: 'x' },
  { '': 'empty' }, { '': 'empty', plain: 'y' }, { '': 'empty', note: 'n\u0000' },
];

const matches = (m: Record<string, string>, f: Record<string, string>): boolean => Object.entries(f).every(([k, v]) => Object.hasOwn(m, k) && m[k] === v);

/** Filters holding a lone surrogate (the embedded store finds them only on better-sqlite3 12). */
const LONE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const loneSurrogate = (f: Record<string, string>): boolean => Object.entries(f).some(([k, v]) => LONE.test(k) || LONE.test(v));

async function exercise(t: Test, store: Store, opts: { loneSurrogateFilters: boolean } = { loneSurrogateFilters: true }): Promise<void> {
  const records: StoredToken[] = METADATA.map((metadata) => makeRecord({ metadata }));
  await store.tokens.insertMany(records);
  for (const r of records) {
    const got = await store.tokens.get(TENANT_A, r.id);
    t.same(sorted(got?.metadata ?? {}), sorted(r.metadata), `get: ${JSON.stringify(r.metadata)}`);
  }
  const many = await store.tokens.getMany(TENANT_A, records.map((r) => r.id));
  t.same(many.map((r) => sorted(r.metadata)).sort(), records.map((r) => sorted(r.metadata)).sort(), 'getMany');
  const listed = (await store.tokens.list(TENANT_A, {}, { size: 100, after: null })).items;
  t.same(listed.map((r) => sorted(r.metadata)), records.map((r) => sorted(r.metadata)).reverse(), 'list, newest first');

  for (const f of FILTERS) {
    if (!opts.loneSurrogateFilters && loneSurrogate(f)) continue;
    const found = (await store.tokens.list(TENANT_A, { metadata: f }, { size: 100, after: null })).items.map((r) => r.id).sort();
    t.same(found, records.filter((r) => matches(r.metadata, f)).map((r) => r.id).sort(), `filter ${JSON.stringify(f)}`);
  }

  const changed = { ...records[0]!, metadata: { note: 'new\u0000', s: '\udbff' }, modified_by: 'app-1', modified_at: new Date().toISOString() };
  t.ok(await store.tokens.update(changed), 'update');
  t.same(sorted((await store.tokens.get(TENANT_A, changed.id))!.metadata), sorted(changed.metadata), 'read back after update');
  const plain = { ...records[1]!, metadata: { plain: 'z' }, modified_by: 'app-1', modified_at: new Date().toISOString() };
  t.ok(await store.tokens.update(plain), 'update back to plain metadata');
  t.same((await store.tokens.get(TENANT_A, plain.id))!.metadata, { plain: 'z' });
  t.same((await store.tokens.list(TENANT_A, { metadata: { plain: 'z' } }, { size: 100, after: null })).items.map((r) => r.id), [plain.id], 'found by its new metadata');
}

t.test('embedded store (the reference)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tp-unstorable-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const store = new EmbeddedStore(join(dir, 'tokens.db'));
  t.teardown(() => store.close());
  // better-sqlite3 13 (Node 22 and later) binds a lone surrogate as U+FFFD, while SQLite's JSON
  // decodes the filter's "\ud800" otherwise: such metadata, written before the vault refused it,
  // is read back as written but not found by a filter there (docs/storage.md). Not a reference
  // for those filters; the PostgreSQL store is held to the exact answers below.
  await exercise(t, store, { loneSurrogateFilters: SQLITE_PACKAGE === 'better-sqlite3' });
});

const server = await postgresForFile(t);
if (server) {
  t.test('PostgreSQL store: the same answers', async (t) => {
    const store = await PostgresStore.connect({ url: (await server.database(t)).url });
    t.teardown(() => store.close());
    await exercise(t, store);
  });
}
