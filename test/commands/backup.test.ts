/**
 * Issue 29: `tokenproxy backup FILE` and `tokenproxy restore FILE` for the embedded store.
 *
 * A real service writes tokens the whole time the backup runs (in this process, and as a separate
 * process); the backup (made with umask 000) is 0600; restored into a fresh data directory, a new
 * service with the same master key reads every token acknowledged before the backup started. The refusals (exit 2) and failures (exit 1)
 * on their exact text: a missing directory, a file in the way without --force, no FILE, a store
 * that is not embedded, a service that runs (by its pid file, and by its lock on the store, as a
 * separate process), a file that is not SQLite or not a tokenproxy store: nothing replaced then.
 */
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli, type Io } from '../../src/cli.js';
import { masterKeyId } from '../../src/crypto/keyring.js';
import { Sqlite } from '../../src/store/embedded/sqlite.js';
import { startChild, writeConfig } from '../helpers/process.js';
import { baseConfig, KEYS, startTestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

// The child-process service compiles the TypeScript again: seconds on a busy machine.
t.setTimeout(300_000);

const root = mkdtempSync(join(tmpdir(), 'tp-backup-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const masterKey = randomBytes(32).toString('base64');
const keyId = masterKeyId(Buffer.from(masterKey, 'base64'));
const dataDir = join(root, 'data');
const store = join(dataDir, 'tokens.db');
const backups = join(root, 'backups');
mkdirSync(backups, { mode: 0o700 });

async function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const io: Io = { out: (x) => void (stdout += x), err: (x) => void (stderr += x), stdin: () => '' };
  const code = await runCli(args, io);
  return { code, stdout, stderr };
}

const configFor = (name: string, path: string, extra: Record<string, unknown> = {}) =>
  writeConfig(root, { ...baseConfig(), store: { kind: 'embedded', path }, ...extra }, name);
const serviceConfig = configFor('service.json', store);
const digest = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');
const mode = (path: string) => statSync(path).mode & 0o777;

const s = await startTestService(t, { dataDir, masterKey });

/** Tokens acknowledged before the backup started: id → value. */
const acknowledged = new Map<string, string>();

t.test('backup while the service writes: 0600 with umask 000; restore into a fresh directory; every acknowledged token reads back', async (t) => {
  for (let batch = 0; batch < 4; batch++) {
    const values = Array.from({ length: 50 }, (_, i) => `before-${batch}-${i}`);
    const r = await s.call('POST', '/tokenize', { body: values });
    t.equal(r.status, 200, r.text);
    (r.body as string[]).forEach((id, i) => acknowledged.set(id, values[i]!));
  }
  let stop = false;
  let written = 0;
  const writer = (async () => {
    for (let n = 0; !stop; n++) {
      const r = await s.call('POST', '/tokenize', { body: Array.from({ length: 50 }, (_, i) => `during-${n}-${i}`) });
      if (r.status !== 200) throw new Error(`a write during the backup failed: ${r.text}`);
      written++;
    }
  })();
  await waitFor(() => written >= 1, { what: 'the writer wrote', timeoutMs: 60_000 });
  const file = join(backups, 'b1.db');
  const umask = process.umask(0);
  let r;
  try {
    r = await cli(['backup', file, '--config', serviceConfig]);
  } finally {
    process.umask(umask);
  }
  const during = written;
  await waitFor(() => written > during, { what: 'the writer wrote after the backup', timeoutMs: 60_000 });
  stop = true;
  await writer;
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stderr, '');
  t.equal(r.stdout, `backed up ${store} to ${file} (${statSync(file).size} bytes, mode 0600); keep the master key apart from it: the copy cannot be read without it\n`);
  t.equal(mode(file), 0o600, 'mode 0600 although the umask was 000');
  t.same(readdirSync(backups), ['b1.db'], 'no temporary file left, no -wal beside the copy');

  const copy = new Sqlite(file, { readonly: true, fileMustExist: true });
  const tokens = (copy.prepare('SELECT count(*) AS n FROM vault_tokens').get() as { n: number }).n;
  copy.close();
  t.ok(tokens >= acknowledged.size, `the copy holds ${tokens} tokens`);

  const freshStore = join(root, 'fresh', 'data', 'tokens.db');
  const freshConfig = configFor('fresh.json', freshStore);
  const restored = await cli(['restore', file, '--config', freshConfig]);
  t.equal(restored.code, 0, restored.stderr);
  t.equal(restored.stdout, `restored ${file} to ${freshStore} (${tokens} token(s), schema version 6); start the service with the master key it was made under (id ${keyId}: a start with another key fails naming both ids)\n`);
  t.equal(mode(freshStore), 0o600, 'the restored store is 0600');
  t.equal(mode(join(root, 'fresh', 'data')), 0o700, 'its new directory 0700');

  const again = await startTestService(t, { dataDir: join(root, 'fresh', 'data'), masterKey });
  let read = 0;
  for (const [id, value] of acknowledged) {
    const got = await again.call('GET', `/tokens/${id}`);
    if (got.status === 200 && got.body.data === value) read++;
    else t.fail(`token ${id}: ${got.status} ${got.text}`);
  }
  t.equal(read, acknowledged.size, `all ${acknowledged.size} tokens acknowledged before the backup read back`);
  await again.svc.close();
});

t.test('backup refusals: exit 2 on the exact text, nothing written', async (t) => {
  const missing = join(root, 'no-such-dir');
  const r = await cli(['backup', join(missing, 'b.db'), '--config', serviceConfig]);
  t.equal(r.code, 2);
  t.equal(r.stderr, `tokenproxy backup: the directory ${missing} does not exist (ENOENT): create it first, readable by the service's user only (mkdir -m 700 ${missing})\n`);
  t.notOk(existsSync(missing), 'no directory created');

  const taken = join(backups, 'taken.db');
  writeFileSync(taken, 'not to be overwritten');
  chmodSync(taken, 0o644);
  const refused = await cli(['backup', taken, '--config', serviceConfig]);
  t.equal(refused.code, 2);
  t.equal(refused.stderr, `tokenproxy backup: ${taken} exists: give --force to replace it, or another file name\n`);
  t.equal(readFileSync(taken, 'utf8'), 'not to be overwritten');
  const forced = await cli(['backup', taken, '--force', '--config', serviceConfig]);
  t.equal(forced.code, 0, forced.stderr);
  t.equal(mode(taken), 0o600, '--force replaced a 0644 file with a 0600 copy');

  const noFile = await cli(['backup', '--config', serviceConfig]);
  t.equal(noFile.code, 2);
  t.equal(noFile.stderr, 'tokenproxy backup: give the FILE to write, e.g. tokenproxy backup /var/backups/tokenproxy/tokens-$(date +%F).db; see tokenproxy backup --help\n');
  const two = await cli(['backup', 'a.db', 'b.db', '--config', serviceConfig]);
  t.equal(two.code, 2);
  t.equal(two.stderr, 'tokenproxy backup: give one FILE, not 2 arguments; see tokenproxy backup --help\n');

  const redis = writeConfig(root, { ...baseConfig(), store: { kind: 'redis', url: 'redis://127.0.0.1:1' } }, 'redis.json');
  const notEmbedded = await cli(['backup', join(backups, 'r.db'), '--config', redis]);
  t.equal(notEmbedded.code, 2);
  t.equal(notEmbedded.stderr, "tokenproxy backup: the store is redis, not embedded: back it up with Redis's own tools (the operations guide shows how)\n");

  const none = await cli(['backup', join(backups, 'n.db'), '--config', configFor('none.json', join(root, 'nothing', 'tokens.db'))]);
  t.equal(none.code, 1);
  t.equal(none.stderr, `tokenproxy backup: there is no embedded store at ${join(root, 'nothing', 'tokens.db')}\n`);
  t.same(readdirSync(backups).sort(), ['b1.db', 'taken.db']);
});

t.test('restore refusals and failures: the store stays as it was', async (t) => {
  const file = join(backups, 'b1.db');
  const targetDir = join(root, 'target');
  const target = join(targetDir, 'tokens.db');
  const targetConfig = configFor('target.json', target);
  t.equal((await cli(['restore', file, '--config', targetConfig])).code, 0);
  const before = digest(target);

  const exists = await cli(['restore', file, '--config', targetConfig]);
  t.equal(exists.code, 2);
  t.equal(exists.stderr, `tokenproxy restore: there is already a store at ${target}: give --force to replace it (its tokens are lost unless it was backed up)\n`);

  const missing = await cli(['restore', join(backups, 'nope.db'), '--force', '--config', targetConfig]);
  t.equal(missing.code, 2);
  t.equal(missing.stderr, `tokenproxy restore: cannot read the backup ${join(backups, 'nope.db')} (ENOENT)\n`);

  const garbage = join(root, 'garbage.db');
  writeFileSync(garbage, randomBytes(8192));
  const notSqlite = await cli(['restore', garbage, '--force', '--config', targetConfig]);
  t.equal(notSqlite.code, 1);
  t.equal(notSqlite.stderr, `tokenproxy restore: the backup ${garbage} is not an SQLite database (SQLITE_NOTADB)\n`);

  const other = join(root, 'other.db');
  const db = new Sqlite(other);
  db.exec('CREATE TABLE notes (x TEXT)');
  db.close();
  const notOurs = await cli(['restore', other, '--force', '--config', targetConfig]);
  t.equal(notOurs.code, 1);
  t.equal(notOurs.stderr, `tokenproxy restore: the backup ${other} is an SQLite database but not a tokenproxy store (no tokens and data_keys tables of a known schema version)\n`);

  t.equal(digest(target), before, 'the store is unchanged');
  t.same(readdirSync(targetDir), ['tokens.db'], 'no temporary file left');

  const memory = writeConfig(root, { ...baseConfig(), store: { kind: 'embedded', path: ':memory:' } }, 'memory.json');
  const inMemory = await cli(['restore', file, '--config', memory]);
  t.equal(inMemory.code, 2);
  t.equal(inMemory.stderr, 'tokenproxy restore: store.path is :memory:, there is no file to restore into\n');
});

t.test('restore refuses while the service runs: by its pid file, and by its open store (a separate process)', async (t) => {
  const file = join(backups, 'b1.db');
  const runDir = join(root, 'running');
  mkdirSync(runDir);
  const runStore = join(runDir, 'tokens.db');
  const pidFile = join(runDir, 'tokenproxy.pid');
  const withPid = configFor('running.json', runStore, { server: { host: '127.0.0.1', port: 0, pid_file: pidFile } });
  const withoutPid = configFor('running-nopid.json', runStore);
  const child = await startChild(withPid, { TOKENPROXY_MASTER_KEY: masterKey });
  t.teardown(() => child.stop());
  const pid = await waitFor(() => existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim(), { what: 'the pid file', timeoutMs: 60_000 });
  const before = digest(runStore);

  const byPid = await cli(['restore', file, '--force', '--config', withPid]);
  t.equal(byPid.code, 2);
  t.equal(byPid.stderr, `tokenproxy restore: the service runs (process ${pid}, pid file ${pidFile}): stop it before restoring its store\n`);

  const byLock = await cli(['restore', file, '--force', '--config', withoutPid]);
  t.equal(byLock.code, 2);
  t.equal(byLock.stderr, `tokenproxy restore: the store ${runStore} is open in another process (a running service?): stop it before restoring\n`);
  t.equal(digest(runStore), before, 'the running service\'s store is unchanged');

  await child.stop();
  const stopped = await cli(['restore', file, '--force', '--config', withPid]);
  t.equal(stopped.code, 0, `once stopped, --force restores: ${stopped.stderr}`);
  t.not(digest(runStore), before);
});

t.test('backup of a service in another process that keeps writing; restored, every acknowledged token reads back', async (t) => {
  const dir = join(root, 'other-process');
  mkdirSync(dir);
  const childStore = join(dir, 'tokens.db');
  const child = await startChild(configFor('other-process.json', childStore), { TOKENPROXY_MASTER_KEY: masterKey });
  t.teardown(() => child.stop());
  const post = (values: string[]) => fetch(`${child.url}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'svc-api-key': KEYS.private }, body: JSON.stringify(values),
  });
  const before = new Map<string, string>();
  for (let batch = 0; batch < 2; batch++) {
    const values = Array.from({ length: 50 }, (_, i) => `child-${batch}-${i}`);
    const r = await post(values);
    t.equal(r.status, 200);
    ((await r.json()) as string[]).forEach((id, i) => before.set(id, values[i]!));
  }
  let stop = false;
  let written = 0;
  const writer = (async () => {
    for (let n = 0; !stop; n++) {
      const r = await post(Array.from({ length: 50 }, (_, i) => `child-during-${n}-${i}`));
      await r.arrayBuffer();
      if (r.status !== 200) throw new Error(`a write during the backup failed: ${r.status}`);
      written++;
    }
  })();
  await waitFor(() => written >= 1, { what: 'the writer wrote', timeoutMs: 60_000 });
  const file = join(backups, 'other-process.db');
  const r = await cli(['backup', file, '--config', configFor('other-process.json', childStore)]);
  const during = written;
  await waitFor(() => written > during, { what: 'the writer wrote after the backup', timeoutMs: 60_000 });
  stop = true;
  await writer;
  t.equal(r.code, 0, r.stderr);
  await child.stop();

  const restoredDir = join(root, 'other-process-restored');
  const restored = await cli(['restore', file, '--config', configFor('other-process-restored.json', join(restoredDir, 'tokens.db'))]);
  t.equal(restored.code, 0, restored.stderr);
  const again = await startTestService(t, { dataDir: restoredDir, masterKey });
  let read = 0;
  for (const [id, value] of before) {
    const got = await again.call('GET', `/tokens/${id}`);
    if (got.status === 200 && got.body.data === value) read++;
    else t.fail(`token ${id}: ${got.status} ${got.text}`);
  }
  t.equal(read, before.size, `all ${before.size} tokens acknowledged before the backup read back`);
  await again.svc.close();
});
