/**
 * EmbeddedStore: the contract on a fresh SQLite file per test (writer thread) and on ':memory:'
 * (in-thread), and what actually lands on disk. The writer thread itself: embedded-writer.test.ts.
 */
import t from 'tap';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT } from '../helpers/cli-entry.js';
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { Sqlite as Database } from '../../src/store/embedded/sqlite.js';
import { runContract, makeRecord, TENANT_A } from './contract.js';
import { encodeRecord } from '../../src/store/codec.js';
import { EmbeddedStore } from '../../src/store/embedded/index.js';
import { packId, packSealed } from '../../src/store/embedded/format.js';
import { createStore } from '../../src/store/factory.js';
import { KeyRing } from '../../src/crypto/keyring.js';
import type { Test } from 'tap';
import { cvcPattern, randomCard, randomCvc } from '../helpers/secrets.js';

function tempDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'tp-embedded-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// A file: writes on the writer thread, reads on this one.
t.test('contract on a file (writer thread)', async (t) => {
  runContract(t, async (t) => {
    const store = new EmbeddedStore(join(tempDir(t), 'tokens.db'));
    t.teardown(() => store.close());
    t.ok(store.writerThread(), 'a writer thread does the writes');
    return store;
  });
});

// ':memory:' cannot be shared with another thread: the same write code runs in this one.
t.test("contract on ':memory:' (in-thread)", async (t) => {
  runContract(t, async (t) => {
    const store = new EmbeddedStore(':memory:');
    t.teardown(() => store.close());
    t.equal(store.writerThread(), null, 'no writer thread');
    return store;
  });
});

t.test('the files hold no plaintext card number or cvc', async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'nested', 'tokens.db');
  const store = new EmbeddedStore(path);
  t.teardown(() => store.close());
  const ring = await KeyRing.open(randomBytes(32), store.dataKeys);
  // Drawn per run (issue 14): a fixed 4-digit cvc turns up by chance in ids, timestamps and
  // ciphertexts, so the cvc is looked for only where it cannot collide (see below).
  const number = randomCard();
  const cvc = randomCvc();
  const record = makeRecord({ type: 'card', container: '/pci/high/' });
  record.sealed = ring.seal(JSON.stringify({ number, expiration_month: 12, expiration_year: 2031 }), `${TENANT_A}:${record.id}`);
  record.cvc_sealed = ring.seal(cvc, `${TENANT_A}:${record.id}:cvc`);
  record.cvc_expires_at = new Date(Date.now() + 3_600_000).toISOString();
  await store.tokens.insertMany([record]);
  const got = await store.tokens.get(TENANT_A, record.id);
  t.equal(got && ring.unseal(got.sealed, `${TENANT_A}:${record.id}`), JSON.stringify({ number, expiration_month: 12, expiration_year: 2031 }));

  const files = [path, `${path}-wal`].filter((f) => existsSync(f));
  t.ok(files.includes(`${path}-wal`), 'the write is in the WAL (not yet checkpointed)');
  const bytes = Buffer.concat(files.map((f) => readFileSync(f)));
  const text = bytes.toString('latin1');
  // Format 6 (issue 24) keeps ids and ciphertext in binary: the scan looks for them as stored.
  t.ok(bytes.includes(packId(record.id)), 'the scan sees the record (its id is there)');
  t.ok(bytes.includes(packSealed(record.sealed)) && bytes.includes(packSealed(record.cvc_sealed!)), 'the ciphertexts are there');
  t.notOk(bytes.includes(number), 'no card number');
  t.notOk(bytes.includes(number.slice(0, 6) + number.slice(-4)) || bytes.includes('"number"'), 'no fragments or field names of the card');
  t.notOk(cvcPattern(cvc).test(text), 'no cvc next to its field name (JSON, form or text)');
  // Every value the database holds, read through SQLite (the WAL included): none is the cvc.
  const db = new Database(path, { readonly: true, fileMustExist: true });
  t.teardown(() => db.close());
  const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>).map((r) => r.name);
  const values: unknown[] = [];
  for (const table of tables) {
    for (const row of db.prepare(`SELECT * FROM "${table.replace(/"/g, '""')}"`).raw().all() as unknown[][]) values.push(...row);
  }
  const cvcStored = packSealed(record.cvc_sealed!);
  t.ok(values.some((v) => Buffer.isBuffer(v) && Buffer.isBuffer(cvcStored) && v.equals(cvcStored)), `the read sees the sealed cvc (${values.length} values in ${tables.length} tables)`);
  t.notOk(values.some((v) => v !== null && String(v) === cvc), 'no stored value is the cvc');
  t.equal(statSync(path).mode & 0o777, 0o600, 'database file is 0600');
});

t.test('a resolved insert survives kill -9 of the process that made it', async (t) => {
  const path = join(tempDir(t), 'tokens.db');
  const r = makeRecord();
  const storeUrl = pathToFileURL(join(ROOT, 'src/store/embedded/index.ts')).href;
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', '--input-type=module', '-e', `
      import { EmbeddedStore } from ${JSON.stringify(storeUrl)};
      const store = new EmbeddedStore(process.argv[1]);
      await store.tokens.insertMany([JSON.parse(process.argv[2])]);
      process.stdout.write('resolved\\n');
      process.kill(process.pid, 'SIGKILL');`, path, JSON.stringify(r)],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  t.teardown(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const [, signal] = await once(child, 'exit');
  t.equal(signal, 'SIGKILL', 'killed, never closed');
  t.equal(out, 'resolved\n');
  const reader = new EmbeddedStore(path);
  t.teardown(() => reader.close());
  t.same(await reader.tokens.get(TENANT_A, r.id), r);
});

t.test('two key rings racing on one file converge on the same data key', async (t) => {
  const path = join(tempDir(t), 'tokens.db');
  const a = new EmbeddedStore(path);
  t.teardown(() => a.close());
  const b = new EmbeddedStore(path);
  t.teardown(() => b.close());
  const master = randomBytes(32);
  const [ra, rb] = await Promise.all([KeyRing.open(master, a.dataKeys), KeyRing.open(master, b.dataKeys)]);
  t.equal(ra.activeKid, rb.activeKid);
  t.equal(rb.unseal(ra.seal('hello', 'aad'), 'aad'), 'hello');
  t.equal((await a.dataKeys.listDataKeys()).length, 1);
});

t.test('factory resolves a relative path against baseDir and creates the directory', async (t) => {
  const dir = tempDir(t);
  const store = await createStore({ kind: 'embedded', path: './data/x/tokens.db', url: '', key_prefix: '' }, { baseDir: dir });
  t.teardown(() => store.close());
  t.equal(store.kind, 'embedded');
  await store.ping();
  t.ok(existsSync(join(dir, 'data', 'x', 'tokens.db')));
});

t.test('an unopenable path is a StoreUnavailableError naming the path, not a crash', async (t) => {
  const dir = tempDir(t);
  const blocker = join(dir, 'file');
  writeFileSync(blocker, 'x'); // a file where a directory should be
  t.throws(() => new EmbeddedStore(join(blocker, 'tokens.db')), { name: 'StoreUnavailableError', message: /cannot open the embedded store/ });
});

/** The schema of version 1, as that release created it (tables only; it had no dedupe_key). */
const SCHEMA_V1 = `
CREATE TABLE tokens (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant_id TEXT NOT NULL, id TEXT NOT NULL, type TEXT NOT NULL, container TEXT NOT NULL,
  fingerprint TEXT, expires_ms INTEGER, cvc_sealed TEXT, cvc_expires_ms INTEGER,
  record TEXT NOT NULL,
  UNIQUE (tenant_id, id)
);
CREATE INDEX tokens_by_tenant ON tokens (tenant_id, seq);
CREATE INDEX tokens_by_type ON tokens (tenant_id, type, seq);
CREATE INDEX tokens_by_fingerprint ON tokens (tenant_id, fingerprint, seq) WHERE fingerprint IS NOT NULL;
CREATE INDEX tokens_cvc_due ON tokens (cvc_expires_ms) WHERE cvc_sealed IS NOT NULL;
CREATE TABLE token_index_hashes (
  tenant_id TEXT NOT NULL, hash TEXT NOT NULL,
  seq INTEGER NOT NULL REFERENCES tokens (seq) ON DELETE CASCADE,
  PRIMARY KEY (tenant_id, hash, seq)
) WITHOUT ROWID;
CREATE INDEX token_index_hashes_by_seq ON token_index_hashes (seq);
CREATE TABLE token_metadata (
  tenant_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
  seq INTEGER NOT NULL REFERENCES tokens (seq) ON DELETE CASCADE,
  PRIMARY KEY (tenant_id, key, value, seq)
) WITHOUT ROWID;
CREATE INDEX token_metadata_by_seq ON token_metadata (seq);
CREATE TABLE data_keys (
  ord INTEGER PRIMARY KEY AUTOINCREMENT,
  kid TEXT NOT NULL UNIQUE, wrapped TEXT NOT NULL, created_at TEXT NOT NULL
);
PRAGMA user_version = 1;`;

t.test('a version 1 file, duplicate fingerprints included: refused at open, converted by the migrator to format 6, deduplicates atomically', async (t) => {
  const path = join(tempDir(t), 'tokens.db');
  const old = new Database(path);
  old.pragma('journal_mode = WAL');
  old.exec(SCHEMA_V1);
  // The non-atomic dedupe of version 1 could leave two tokens with one fingerprint in one container.
  const twins = [makeRecord({ fingerprint: 'fp-twin' }), makeRecord({ fingerprint: 'fp-twin' })];
  const insert = old.prepare('INSERT INTO tokens (tenant_id, id, type, container, fingerprint, record) VALUES (?, ?, ?, ?, ?, ?)');
  for (const r of twins) insert.run(r.tenant_id, r.id, r.type, r.container, r.fingerprint, encodeRecord(r));
  old.close();

  // Issue 24 item 3: a service start never converts an old file; it names the command.
  t.throws(() => new EmbeddedStore(path), { name: 'StoreFormatError', message: /format 1.*format 6.*tokenproxy migrate/ });
  const check = new Database(path, { readonly: true });
  t.teardown(() => check.close());
  t.equal(check.pragma('user_version', { simple: true }), 1, 'the refused start left the file as it was');
  const converting = new EmbeddedStore(path, { forMigration: true });
  t.equal(check.pragma('user_version', { simple: true }), 5, 'opened for migration: the DDL-only steps to version 5 ran');
  t.ok((check.prepare('SELECT name FROM pragma_table_info(?)').all('audit_heads') as Array<{ name: string }>).some((c) => c.name === 'anchor'), 'heads have an anchor column (version 5)');
  t.ok(check.prepare("SELECT 1 FROM sqlite_master WHERE name = 'idempotency_keys'").get(), 'with the idempotency table (version 3)');
  const migrator = converting.migrator();
  t.same(await migrator.status(), { from: 5, to: 6, pending: 2, total: 2 });
  t.same(await migrator.step(1), { converted: 1, done: false });
  t.same(await migrator.status(), { from: 5, to: 6, pending: 1, total: 2 }, 'progress is kept in the file');
  t.same(await migrator.step(10), { converted: 1, done: false });
  t.same(await migrator.step(10), { converted: 0, done: true });
  await converting.close();
  t.equal(check.pragma('user_version', { simple: true }), 6);
  t.notOk(check.prepare("SELECT 1 FROM sqlite_master WHERE name = 'tokens'").get(), 'the format 5 tables are gone');

  const store = new EmbeddedStore(path);
  t.teardown(() => store.close());
  t.same(await store.tokens.get(TENANT_A, twins[0]!.id), twins[0], 'old records read as before');
  t.same((await store.tokens.list(TENANT_A, {}, { size: 10, after: null })).items.map((r) => r.id), [twins[1]!.id, twins[0]!.id]);
  const results = await Promise.all(Array.from({ length: 10 }, () => store.tokens.insertMany([makeRecord({ fingerprint: 'fp-twin' })], { dedupe: [true] })));
  t.ok(results.every((r) => r[0]?.id === twins[0]!.id), 'deduplicates to the oldest of the twins');
  const fresh = await Promise.all(Array.from({ length: 10 }, () => store.tokens.insertMany([makeRecord({ fingerprint: 'fp-new' })], { dedupe: [true] })));
  t.equal(fresh.filter((r) => r[0] === null).length, 1, 'ten concurrent identical inserts write one token');
  t.equal((check.prepare("SELECT count(*) AS n FROM vault_tokens WHERE fingerprint = 'fp-new'").get() as { n: number }).n, 1, 'one row on disk');
  await store.close();
  const again = new EmbeddedStore(path);
  t.teardown(() => again.close());
  t.equal((await again.tokens.list(TENANT_A, {}, { size: 10, after: null })).items.length, 3, 'opening a format 6 file again changes nothing');
  t.same(await again.migrator().status(), { from: 6, to: 6, pending: 0, total: 3 }, 'nothing left to migrate');
});

t.test('a file newer than this code is refused, and left as it was', async (t) => {
  const path = join(tempDir(t), 'tokens.db');
  const db = new Database(path);
  db.pragma('user_version = 99');
  db.close();
  t.throws(() => new EmbeddedStore(path), { name: 'StoreUnavailableError', message: /cannot open the embedded store/ });
  const check = new Database(path, { readonly: true });
  t.teardown(() => check.close());
  t.equal(check.pragma('user_version', { simple: true }), 99);
});

t.test('a format 6 file of an earlier release (no reactor results table, issue 28): a start adds the table, its tokens untouched', async (t) => {
  const path = join(tempDir(t), 'tokens.db');
  const before = new EmbeddedStore(path);
  const r = makeRecord();
  await before.tokens.insertMany([r]);
  await before.close();
  const db = new Database(path);
  db.exec('DROP TABLE reactor_results');
  const version = db.pragma('user_version', { simple: true });
  db.close();
  const store = new EmbeddedStore(path);
  t.teardown(() => store.close());
  t.same(await store.tokens.get(TENANT_A, r.id), r, 'the token reads as before');
  await store.reactorResults.putReactorResult({ tenant_id: TENANT_A, id: 'r1', sealed: 's', expires_ms: Date.now() + 60_000 });
  t.equal((await store.reactorResults.getReactorResult(TENANT_A, 'r1'))?.sealed, 's', 'the table is there and works');
  const after = new Database(path, { readonly: true });
  t.equal(after.pragma('user_version', { simple: true }), version, 'the format number is unchanged');
  after.close();
});
