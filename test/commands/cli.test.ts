/**
 * The command line (issue 13: an operator's first hour), run as a child process: --help and
 * --version, usage errors without a stack trace, hash-key, gen-key (whose entry a real service
 * then accepts over HTTP), gen-master-key (with which a real service starts), check-config.
 */
import t, { type Test } from 'tap';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli, type Io } from '../../src/cli.js';
import { spawnCli } from '../helpers/cli-entry.js';
import { startChild, writeConfig } from '../helpers/process.js';
import { APP_PRIVATE, TENANT_A } from '../helpers/service.js';

const dir = mkdtempSync(join(tmpdir(), 'tp-cli-commands-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The CLI (helpers/cli-entry.ts) as `tokenproxy ARGS`, optionally with stdin. */
function cli(args: string[], stdin = '', env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawnCli(args, { ...process.env, ...env }, {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
    child.stdin!.end(stdin);
  });
}

/**
 * The same commands in this process (runCli with captured streams): the many small cases run here,
 * since each child process compiles the TypeScript again (seconds on a busy machine).
 */
async function inProcess(args: string[], stdin = ''): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const io: Io = { out: (x) => void (stdout += x), err: (x) => void (stderr += x), stdin: () => stdin };
  const code = await runCli(args, io);
  return { code, stdout, stderr };
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const noStack = (t: Test, r: Run) => t.notMatch(r.stdout + r.stderr, /\n\s+at /, 'no stack trace');

t.test('--help lists every command; COMMAND --help and help COMMAND show its usage', async (t) => {
  const r = await cli(['--help']);
  t.equal(r.code, 0, 'as a child process');
  for (const c of ['start', 'check-config', 'hash-key', 'gen-key', 'gen-master-key', 'reload', 'rotate-data-key']) t.match(r.stdout, new RegExp(`\\n  ${c} `), c);
  t.match(r.stdout, /Exit codes: 0 done, 1 the command failed.*2 usage error/);
  const a = await inProcess(['gen-key', '--help']);
  const b = await inProcess(['help', 'gen-key']);
  t.equal(a.code, 0);
  t.equal(b.code, 0);
  t.match(a.stdout, /^tokenproxy gen-key --type private\|public\|management\|proxy/);
  t.equal(a.stdout, b.stdout);
});

t.test('--version prints package.json version', async (t) => {
  const r = await inProcess(['--version']);
  const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };
  t.equal(r.code, 0);
  t.equal(r.stdout.trim(), version);
});

t.test('usage errors: one line, exit 2, no stack trace', async (t) => {
  const child = await cli(['--bogus']);
  t.equal(child.code, 2, 'the process exits 2');
  t.match(child.stderr, /^tokenproxy start: Unknown option '--bogus'; see tokenproxy start --help\n$/);
  noStack(t, child);
  for (const args of [['--bogus'], ['nope'], ['gen-key'], ['gen-key', '--type', 'root'], ['check-config', 'extra'], ['help', 'nope']]) {
    const r = await inProcess(args);
    t.equal(r.code, 2, args.join(' '));
    t.equal(r.stdout, '', `${args.join(' ')}: nothing on stdout`);
    t.match(r.stderr, /^tokenproxy[^\n]*\n$/, `${args.join(' ')}: one line on stderr`);
    noStack(t, r);
  }
});

t.test('hash-key reads the key on stdin and prints only its digest entry', async (t) => {
  const key = `key_${Math.random().toString(36).slice(2)}_cli_hash_test`;
  const r = await cli(['hash-key'], `${key}\n`);
  t.equal(r.code, 0);
  t.equal(r.stdout, `{ sha256: "${sha256(key)}" }\n`);
  t.notOk((r.stdout + r.stderr).includes(key), 'the key itself is not printed');
  const short = await inProcess(['hash-key'], 'short\n');
  t.equal(short.code, 2);
  t.match(short.stderr, /at least 16 characters/);
  t.notOk(short.stderr.includes('short'), 'not even a rejected key is echoed');
  const two = await inProcess(['hash-key'], `${key}\n${key}\n`);
  t.equal(two.code, 2, 'two lines are refused');
});

t.test('gen-key: a new key each time, and a service configured with its entry accepts it', async (t) => {
  const a = await cli(['gen-key', '--type', 'private']);
  const b = await inProcess(['gen-key', '-t', 'private']);
  t.equal(a.code, 0);
  const [key, entry] = a.stdout.trim().split('\n');
  t.match(key, /^tp_private_[A-Za-z0-9_-]{43}$/);
  t.equal(entry, `{ sha256: "${sha256(key!)}" }`);
  t.not(b.stdout.split('\n')[0], key, 'keys differ between runs');
  const proxy = await inProcess(['gen-key', '--type', 'proxy']);
  const [pkey, pentry] = proxy.stdout.trim().split('\n');
  t.equal(pentry, `key_sha256: "${sha256(pkey!)}"`);

  const master = await inProcess(['gen-master-key']);
  t.equal(master.code, 0);
  t.equal(Buffer.from(master.stdout.trim(), 'base64').length, 32, 'the master key is 32 bytes in base64');
  const digest = /sha256: "([0-9a-f]{64})"/.exec(entry!)![1]!;
  const path = writeConfig(dir, {
    server: { port: 0 },
    store: { kind: 'embedded', path: join(dir, 'gen-key.db') },
    tenants: [{
      id: TENANT_A, name: 'a',
      applications: [{ id: APP_PRIVATE, name: 'p', type: 'private', keys: [{ sha256: digest }], permissions: ['token:create'] }],
    }],
  }, 'gen-key.json');
  const service = await startChild(path, { TOKENPROXY_MASTER_KEY: master.stdout.trim() });
  t.teardown(() => service.stop());
  const ok = await fetch(`${service.url}/tokenize`, {
    method: 'POST', headers: { 'SVC-API-KEY': key!, 'content-type': 'application/json' }, body: JSON.stringify({ a: 'x' }),
  });
  t.equal(ok.status, 200, 'the generated key is accepted through its digest');
  const wrong = await fetch(`${service.url}/tokenize`, {
    method: 'POST', headers: { 'SVC-API-KEY': b.stdout.split('\n')[0]!, 'content-type': 'application/json' }, body: '{}',
  });
  t.equal(wrong.status, 401, 'another generated key is not');
  t.notOk(service.output().includes(key!), 'the key is not in the service output');
});

t.test('check-config: OK with a summary and exit 0; every problem and exit 1', async (t) => {
  const ok = await inProcess(['check-config', '--config', 'config/tokenproxy.yaml']);
  t.equal(ok.code, 0);
  t.match(ok.stdout, /tokenproxy\.yaml: OK \(1 tenant\(s\), 2 application\(s\)/);
  t.notOk(ok.stdout.includes('key_dev_private_change_me'), 'no key printed');
  const bad = writeConfig(dir, { server: { port: 'eighty' }, log: { level: 'loud' } }, 'bad.json');
  const r = await cli(['check-config', '-c', bad]);
  t.equal(r.code, 1, 'as a child process');
  t.equal(r.code, 1);
  t.match(r.stderr, /server\.port/);
  t.match(r.stderr, /log\.level/);
  noStack(t, r);
});
