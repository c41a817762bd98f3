/**
 * Issue 24 item 3: `tokenproxy migrate` on the embedded store, from the file today's code wrote
 * before the compact format (test/fixtures/embedded-v5: made by make.ts through the HTTP API, a
 * fixed TEST master key, test values only) to format 6:
 *
 * - a service start on the unmigrated file fails, naming both formats and the command, and
 *   leaves the file as it was; --dry-run changes nothing (the file's hash);
 * - the CLI converts a copy; the service started on it reads every token back over HTTP as
 *   expected.json says (data, metadata, search indexes, fingerprint expression, expiry, the
 *   sealed cvc), and list order, search, the fingerprint filter and deduplication work on the
 *   migrated tokens, as do new tokens;
 * - a migrate process killed with -9 mid-way (a larger store, a tiny --batch) and run again
 *   loses nothing.
 */
import t from 'tap';
import { createHash, randomUUID } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli, type Io } from '../../src/cli.js';
import { KeyRing } from '../../src/crypto/keyring.js';
import { encodeRecord } from '../../src/store/codec.js';
import { EmbeddedStore } from '../../src/store/embedded/index.js';
import { Sqlite } from '../../src/store/embedded/sqlite.js';
import type { StoredToken } from '../../src/store/types.js';
import { spawnCli } from '../helpers/cli-entry.js';
import { writeConfig } from '../helpers/process.js';
import { APP_PRIVATE, baseConfig, KEYS, startTestService, TENANT_A, TENANT_B } from '../helpers/service.js';

t.setTimeout(300_000);

const FIXTURE = new URL('../fixtures/embedded-v5/', import.meta.url);
interface Expected {
  tenant: string;
  id: string;
  type: string;
  data: unknown;
  containers: string[];
  metadata: Record<string, string>;
  search_indexes: string[];
  fingerprint_expression: string | null;
  expires_at: string | null;
  cvc: string | null;
  search?: string;
}
const expected = JSON.parse(readFileSync(new URL('expected.json', FIXTURE), 'utf8')) as { master_key: string; tokens: Expected[] };
const MASTER_KEY = expected.master_key;
const root = mkdtempSync(join(tmpdir(), 'tp-migrate-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
// The fixture was made with a cvc retention of ten years, so its cvcs are still there to check.
const serviceConfig = () => ({ ...baseConfig(), store: { cvc_retention_seconds: 10 * 365 * 24 * 3600 } });

async function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const io: Io = { out: (x) => void (stdout += x), err: (x) => void (stderr += x), stdin: () => '' };
  const before = process.env.TOKENPROXY_MASTER_KEY;
  process.env.TOKENPROXY_MASTER_KEY = MASTER_KEY;
  try {
    const code = await runCli(args, io);
    return { code, stdout, stderr };
  } finally {
    if (before === undefined) delete process.env.TOKENPROXY_MASTER_KEY;
    else process.env.TOKENPROXY_MASTER_KEY = before;
  }
}

const hash = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');
const version = (path: string) => {
  const db = new Sqlite(path, { readonly: true, fileMustExist: true });
  try {
    return Number(db.pragma('user_version', { simple: true }));
  } finally {
    db.close();
  }
};

/**
 * A copy of the fixture in a directory of its own (as the service's data directory), in WAL mode
 * as a store the service has used is (the fixture is committed without a -wal file), and a config
 * naming it.
 */
function prepare(name: string): { dir: string; db: string; config: string } {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  const db = join(dir, 'tokens.db');
  copyFileSync(new URL('tokens.db', FIXTURE), db);
  const wal = new Sqlite(db);
  wal.pragma('journal_mode = WAL');
  wal.close();
  return { dir, db, config: writeConfig(root, { ...serviceConfig(), store: { kind: 'embedded', path: db } }, `${name}.json`) };
}

t.test('a service start on the format 5 file fails naming both formats and tokenproxy migrate; the file is left as it was', async (t) => {
  const f = prepare('refused');
  const before = hash(f.db);
  await t.rejects(startTestService(t, { dataDir: f.dir, masterKey: MASTER_KEY, config: serviceConfig() }), {
    name: 'StoreFormatError', message: /format 5.*format 6.*`tokenproxy migrate`/,
  });
  t.equal(hash(f.db), before, 'the file is unchanged');
  t.equal(version(f.db), 5);
});

t.test('--dry-run says what it would convert and changes nothing', async (t) => {
  const f = prepare('dry');
  const before = hash(f.db);
  const r = await cli(['migrate', '--dry-run', '--config', f.config]);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout, `dry run: would convert 22 of 22 token(s) of the embedded store from format 5 to format 6, 1,000 a step; nothing was changed\n`);
  t.equal(hash(f.db), before, 'the file hash is unchanged');
  t.equal(version(f.db), 5);
});

t.test('usage and refusals: a bad --batch (2), a wrong master key (1, nothing changed)', async (t) => {
  const f = prepare('refusals');
  for (const bad of ['0', 'x', '1000001', '-5', '2.5']) {
    const r = await cli(['migrate', `--batch=${bad}`, '--config', f.config]);
    t.equal(r.code, 2, `--batch ${bad}`);
    t.match(r.stderr, /--batch must be a whole number from 1 to 100,000/);
  }
  const before = hash(f.db);
  let stderr = '';
  const saved = process.env.TOKENPROXY_MASTER_KEY;
  process.env.TOKENPROXY_MASTER_KEY = Buffer.alloc(32, 9).toString('base64');
  try {
    const code = await runCli(['migrate', '--config', f.config], { out: () => {}, err: (x) => void (stderr += x), stdin: () => '' });
    t.equal(code, 1);
  } finally {
    if (saved === undefined) delete process.env.TOKENPROXY_MASTER_KEY;
    else process.env.TOKENPROXY_MASTER_KEY = saved;
  }
  t.match(stderr, /the master key \(id [^)]+\) is not the one this store's data keys were wrapped with; nothing was changed/);
  t.equal(hash(f.db), before, 'nothing was changed');
});

t.test('on a terminal: a progress bar redrawn in place', async (t) => {
  const f = prepare('tty');
  let stdout = '';
  const saved = process.env.TOKENPROXY_MASTER_KEY;
  process.env.TOKENPROXY_MASTER_KEY = MASTER_KEY;
  try {
    const io = { out: (x: string) => void (stdout += x), err: (x: string) => void (stdout += x), stdin: () => '', tty: true };
    t.equal(await runCli(['migrate', '--batch', '10', '--config', f.config], io), 0, stdout);
  } finally {
    if (saved === undefined) delete process.env.TOKENPROXY_MASTER_KEY;
    else process.env.TOKENPROXY_MASTER_KEY = saved;
  }
  t.match(stdout, '\r[------------------------------]   0%  0/22 tokens\r[##############----------------]  45%  10/22 tokens');
  t.match(stdout, '\r[##############################] 100%  22/22 tokens\ndone: 22 token(s), as before');
  t.notMatch(stdout, /converted \d+ of/, 'no plain progress lines');
});

t.test('migrated by the CLI, the service reads every token of the fixture back over HTTP', async (t) => {
  const f = prepare('migrated');
  const r = await cli(['migrate', '--batch', '5', '--config', f.config]);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /^converting 22 of 22 token\(s\) of the embedded store from format 5 to format 6, 5 a step/);
  t.match(r.stdout, /converted 22 of 22 token\(s\) \(100%\)\n/, 'plain progress lines (not a terminal)');
  t.match(r.stdout, /done: 22 token\(s\), as before; 22 of them \(the newest of each configured tenant\) decrypt under the master key\n$/);
  t.equal(version(f.db), 6);
  const again = await cli(['migrate', '--config', f.config]);
  t.same([again.code, again.stdout], [0, 'the embedded store is already at format 6 (22 token(s)): nothing to do\n']);

  const s = await startTestService(t, { dataDir: f.dir, masterKey: MASTER_KEY, config: serviceConfig() });
  const keyOf = (tenant: string) => (tenant === TENANT_B ? KEYS.tenantB : KEYS.private);
  const ring = await KeyRing.open(Buffer.from(MASTER_KEY, 'base64'), s.svc.store.dataKeys);
  for (const e of expected.tokens) {
    const got = await s.call('GET', `/tokens/${encodeURIComponent(e.id)}`, { key: keyOf(e.tenant) });
    t.equal(got.status, 200, `${e.id} answers 200`);
    // Tenant B's application has no reveal rule in the test config: its data is checked sealed, below.
    const data = e.tenant === TENANT_B ? e.data : got.body.data;
    t.same(
      [got.body.id, got.body.type, data, got.body.metadata ?? {}, got.body.search_indexes ?? [], got.body.fingerprint_expression ?? null, got.body.containers, got.body.expires_at ?? null],
      [e.id, e.type, e.data, e.metadata, e.search_indexes, e.fingerprint_expression, e.containers, e.expires_at],
      `${e.id} reads back as it was written`,
    );
    const stored = await s.svc.store.tokens.get(e.tenant, e.id);
    t.same(stored && JSON.parse(ring.unseal(stored.sealed, `${e.tenant}:${e.id}`)), e.data, `${e.id}: its sealed data`);
    t.equal(stored?.cvc_sealed ? ring.unseal(stored.cvc_sealed, `${e.tenant}:${e.id}:cvc`) : null, e.cvc, `${e.id}: its sealed cvc`);
  }
  const patched = await s.call('GET', `/tokens/${expected.tokens.find((e) => e.data === 'fixture secret one, patched')!.id}`);
  t.equal(patched.body.modified_by, APP_PRIVATE, 'a patched token keeps who modified it');

  // List: every token of tenant A, newest first, as before (the fixture's creation order).
  const listed = await s.call('GET', '/tokens?size=100');
  t.same(listed.body.data.map((x: { id: string }) => x.id), expected.tokens.filter((e) => e.tenant === TENANT_A).map((e) => e.id).reverse());
  const paged = await s.call('GET', '/tokens?size=5');
  const page2 = await s.call('GET', `/tokens?size=5&start=${encodeURIComponent(paged.body.pagination.next)}`);
  t.same(page2.body.data.map((x: { id: string }) => x.id), listed.body.data.slice(5, 10).map((x: { id: string }) => x.id), 'pages follow on');
  // Search by data (the migrated index hashes) and metadata.
  for (const e of expected.tokens.filter((x) => x.search)) {
    const found = await s.call('POST', '/tokens/search', { body: { query: e.search } });
    t.ok(found.body.data.some((x: { id: string }) => x.id === e.id), `search ${e.search} finds ${e.id}`);
  }
  const byMeta = await s.call('GET', '/tokens?metadata.plan=gold');
  t.equal(byMeta.body.data.length, 3, 'metadata filter');
  // The fingerprint filter and deduplication find the migrated card.
  const dedupeCard = expected.tokens.find((e) => (e.data as { number?: string }).number === '4111111111111111')!;
  const fp = (await s.call('GET', `/tokens/${dedupeCard.id}`)).body.fingerprint as string;
  t.same((await s.call('GET', `/tokens?fingerprint=${fp}`)).body.data.map((x: { id: string }) => x.id), [dedupeCard.id], 'fingerprint filter');
  const again2 = await s.call('POST', '/tokenize', { body: { type: 'card', data: { number: '4111111111111111', expiration_month: 12, expiration_year: 2033 }, deduplicate_token: true } });
  t.equal(again2.body.id, dedupeCard.id, 'a deduplicating create returns the migrated token');
  const unicode = expected.tokens.find((e) => e.data === 'unicode ✓ värde 中文')!;
  const again3 = await s.call('POST', '/tokenize', { body: { type: 'token', data: 'unicode ✓ värde 中文', fingerprint_expression: '{{ data }}', deduplicate_token: true } });
  t.equal(again3.body.id, unicode.id, 'its custom fingerprint expression too');
  // New tokens beside the migrated ones.
  const fresh = await s.call('POST', '/tokenize', { body: 'after the migration' });
  t.equal((await s.call('GET', `/tokens/${fresh.body}`)).body.data, 'after the migration');
  t.equal((await s.call('GET', '/tokens?size=1')).body.data[0].id, fresh.body, 'listed first');
  // Tenant B's tokens stay tenant B's.
  const b = expected.tokens.find((e) => e.tenant === TENANT_B)!;
  t.equal((await s.call('GET', `/tokens/${b.id}`)).status, 404, 'not readable by tenant A');
});

/** Adds `count` tokens in format 5 (records as codec.encodeRecord writes them, sealed under the fixture's key). */
async function addLegacyTokens(path: string, count: number): Promise<Map<string, StoredToken>> {
  const db = new Sqlite(path);
  const keys = db.prepare('SELECT kid, wrapped, created_at FROM data_keys ORDER BY ord').all() as Array<{ kid: string; wrapped: string; created_at: string }>;
  const ring = await KeyRing.open(Buffer.from(MASTER_KEY, 'base64'), { listDataKeys: async () => keys, addDataKey: async () => keys });
  const insert = db.prepare(
    `INSERT INTO tokens (tenant_id, id, type, container, fingerprint, expires_ms, cvc_sealed, cvc_expires_ms, record, dedupe_key)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const hashInsert = db.prepare('INSERT INTO token_index_hashes (tenant_id, hash, seq) VALUES (?, ?, ?)');
  const metaInsert = db.prepare('INSERT INTO token_metadata (tenant_id, key, value, seq) VALUES (?, ?, ?, ?)');
  const made = new Map<string, StoredToken>();
  db.transaction(() => {
    for (let i = 0; i < count; i++) {
      const id = i % 7 === 0 ? `bulk-${i}` : randomUUID();
      const r: StoredToken = {
        tenant_id: TENANT_A, id, type: 'token', container: '/general/high/', sealed: ring.seal(JSON.stringify(`bulk value ${i}`), `${TENANT_A}:${id}`),
        cvc_sealed: null, cvc_expires_at: null, metadata: { batch: String(i % 10) }, search_indexes: ['{{ data }}'],
        index_hashes: [createHash('sha256').update(`h${i}`).digest('hex')], fingerprint: createHash('sha256').update(`f${i}`).digest('hex'),
        fingerprint_expression: '{{ data }}', mask: null, created_by: APP_PRIVATE, created_at: new Date(1_790_000_000_000 + i).toISOString(),
        modified_by: null, modified_at: null, expires_at: null,
      };
      const seq = Number(insert.run(r.tenant_id, r.id, r.type, r.container, r.fingerprint, null, null, null, encodeRecord(r), null).lastInsertRowid);
      hashInsert.run(r.tenant_id, r.index_hashes[0]!, seq);
      metaInsert.run(r.tenant_id, 'batch', r.metadata.batch!, seq);
      made.set(id, r);
    }
  })();
  db.close();
  return made;
}

t.test('kill -9 mid-way through a migration, then run it again: nothing lost', async (t) => {
  const f = prepare('killed');
  const made = await addLegacyTokens(f.db, 3000);
  const total = 3022;
  // The real CLI as a process of its own (helpers/cli-entry.ts), a step of 10 tokens.
  const child = spawnCli(['migrate', '--batch', '10', '--config', f.config], { ...process.env, TOKENPROXY_MASTER_KEY: MASTER_KEY }, {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code, signal) => resolve(signal === 'SIGKILL' ? -9 : code)));
  await new Promise<void>((resolve) => {
    child.stdout!.on('data', (d) => {
      out += d;
      // Killed once it has converted a tenth: the steps committed so far are its progress.
      if (/\(10%\)/.test(out)) resolve();
    });
    child.on('exit', () => resolve());
  });
  child.kill('SIGKILL');
  t.equal(await exited, -9, `killed mid-way (${out.trim().split('\n').at(-1)})`);
  t.equal(version(f.db), 5, 'still format 5');
  const mid = new EmbeddedStore(f.db, { forMigration: true });
  const status = await mid.migrator().status();
  await mid.close();
  t.ok(status.pending > 0 && status.pending < total, `part converted: ${total - status.pending} of ${total}`);
  t.equal(status.total, total);

  const r = await cli(['migrate', '--batch', '500', '--config', f.config]);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, new RegExp(`^converting ${status.pending.toLocaleString('en-US')} of ${total.toLocaleString('en-US')} token`), 'goes on from where it stopped');
  t.match(r.stdout, /done: 3,022 token\(s\), as before/);

  const store = new EmbeddedStore(f.db);
  t.teardown(() => store.close());
  t.same(await store.migrator().status(), { from: 6, to: 6, pending: 0, total });
  let same = 0;
  for (const [id, r0] of made) if (JSON.stringify(await store.tokens.get(TENANT_A, id)) === JSON.stringify(r0)) same++;
  t.equal(same, made.size, 'every generated token reads back exactly');
  const listed: string[] = [];
  for (let after: string | null = null; ;) {
    const p = await store.tokens.list(TENANT_A, { metadata: { batch: '3' } }, { size: 100, after });
    listed.push(...p.items.map((x) => x.id));
    if (!p.next) break;
    after = p.next;
  }
  t.equal(listed.length, 300, 'the metadata side table was converted');
  const one = made.get([...made.keys()][42]!)!;
  t.same((await store.tokens.list(TENANT_A, { index_hashes: one.index_hashes }, { size: 10, after: null })).items.map((x) => x.id), [one.id], 'and the search hashes');
});
