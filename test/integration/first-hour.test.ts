/**
 * Issue 29, "the first hour and the first deployment": the shipped config/tokenproxy.yaml run as a
 * fresh clone runs it (in a directory of its own, as the working directory):
 *
 * - with NODE_ENV=production it refuses to start, says why in three lines or fewer, exits 1 and
 *   creates nothing (no development master key);
 * - in development mode it starts, says once what production mode would refuse, writes the pid
 *   file `tokenproxy reload` finds without flags, and on SIGINT or SIGTERM to the whole process
 *   group (a terminal's Ctrl-C, `timeout`, a service manager) it stops without an error line: the
 *   reactor host (the default config has a reactor) stops, it is not "restarted", and the pid file
 *   is removed.
 */
import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { waitFor } from '../helpers/wait.js';

const root = resolve('.');
const MAIN = join(root, 'src/main.ts');
const base = mkdtempSync(join(tmpdir(), 'tp-first-hour-'));
t.teardown(() => rmSync(base, { recursive: true, force: true }));

/** A copy of what a clone holds for `npm start`: config/ and reactors/ (node_modules linked, for the test's loader). */
function clone(name: string, edit?: (yaml: string) => string): string {
  const dir = join(base, name);
  mkdirSync(dir);
  cpSync(join(root, 'config'), join(dir, 'config'), { recursive: true });
  cpSync(join(root, 'reactors'), join(dir, 'reactors'), { recursive: true });
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
  if (edit) {
    const file = join(dir, 'config/tokenproxy.yaml');
    writeFileSync(file, edit(readFileSync(file, 'utf8')));
  }
  return dir;
}

/** The environment without the test runner's NODE_ENV or config choices. */
function env(extra: Record<string, string>): NodeJS.ProcessEnv {
  const e: NodeJS.ProcessEnv = { ...process.env, PORT: '0', ...extra };
  for (const k of ['NODE_ENV', 'TOKENPROXY_CONFIG', 'TOKENPROXY_MASTER_KEY', 'HOST']) if (!(k in extra)) delete e[k];
  return e;
}

interface Proc {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<number | null>;
}

/** `node src/main.ts ARGS` in `cwd`, detached (it leads its own process group, as under a terminal). */
function run(cwd: string, args: string[], extra: Record<string, string> = {}): Proc {
  const child = spawn(process.execPath, [...process.execArgv.filter((a) => !a.startsWith('--inspect')), MAIN, ...args], {
    cwd, env: env(extra), stdio: ['ignore', 'pipe', 'pipe'], detached: true,
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d));
  child.stderr!.on('data', (d: Buffer) => (err += d));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  t.teardown(() => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // the group is gone
    }
  });
  return { child, stdout: () => out, stderr: () => err, exited };
}

type Line = Record<string, unknown> & { level?: number; msg?: string };
function lines(text: string): Line[] {
  return text.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
}

t.test('the default config under NODE_ENV=production refuses to start, in three lines or fewer, and creates nothing', async (t) => {
  const dir = clone('production');
  const p = run(dir, [], { NODE_ENV: 'production' });
  t.equal(await p.exited, 1, 'exit code 1');
  const said = p.stderr().trimEnd().split('\n');
  t.ok(said.length <= 3, `at most three lines (${said.length})`);
  t.same(said, [
    `tokenproxy: production mode refuses to start: no master key: set TOKENPROXY_MASTER_KEY or secrets.master_key_file (tokenproxy gen-master-key makes one); the development key ${join(dir, 'data/master.key')} is for development only`,
    'tokenproxy: production mode refuses to start: tenants[0].applications[0].keys[0], tenants[0].applications[1].keys[0] and tenants[0].proxies[0].key are development keys published in the README and the default config: make your own (tokenproxy gen-key --type private|public|proxy) and list their digests',
  ]);
  t.equal(p.stdout(), '', 'nothing on standard output');
  t.notOk(existsSync(join(dir, 'data')), 'no data directory, no development master key was created');
});

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  t.test(`development mode: one notice, a pid file reload finds, and ${signal} to the process group stops it without an error line`, async (t) => {
    const dir = clone(`dev-${signal}`);
    const p = run(dir, []);
    const listening = await waitFor(() => lines(p.stdout()).find((l) => l.msg === 'tokenproxy listening'), { timeoutMs: 60_000, what: `listening:\n${p.stdout()}${p.stderr()}` });
    const url = listening.url as string;

    const notices = lines(p.stdout()).filter((l) => typeof l.msg === 'string' && l.msg.startsWith('development mode:'));
    t.equal(notices.length, 1, 'development mode says it once');
    t.same(notices[0]?.would_refuse, [
      `no master key: set TOKENPROXY_MASTER_KEY or secrets.master_key_file (tokenproxy gen-master-key makes one); the development key ${join(dir, 'data/master.key')} is for development only`,
      'tenants[0].applications[0].keys[0], tenants[0].applications[1].keys[0] and tenants[0].proxies[0].key are development keys published in the README and the default config: make your own (tokenproxy gen-key --type private|public|proxy) and list their digests',
    ], 'and names what production mode would refuse');

    // The reactor host is up: the default config's reactor answers.
    const react = await fetch(`${url}/reactors/card-brand/react`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'svc-api-key': 'key_dev_private_change_me_0000000000' },
      body: JSON.stringify({ args: { card: { number: '4242424242424242', expiration_month: 12, expiration_year: 2030 } } }),
    });
    t.equal(react.status, 200, `the reactor answers (${react.status})`);
    await react.text();

    const pidFile = join(dir, 'data/tokenproxy.pid');
    t.equal(readFileSync(pidFile, 'utf8').trim(), String(p.child.pid), 'the default config writes the pid file');
    const reload = run(dir, ['reload']);
    t.equal(await reload.exited, 0, `tokenproxy reload finds it without flags: ${reload.stdout()}${reload.stderr()}`);
    t.match(reload.stdout(), new RegExp(`process ${p.child.pid}: serves the new file`));

    process.kill(-p.child.pid!, signal);
    t.equal(await p.exited, 0, 'exit 0');
    const all = lines(p.stdout());
    t.ok(all.some((l) => l.msg === 'stopping: draining requests in flight'), 'it drained');
    t.same(all.filter((l) => (l.level ?? 0) >= 50).map((l) => l.msg), [], 'no error or fatal line');
    t.notMatch(p.stdout() + p.stderr(), /reactor host died|restarting|IPC channel|ERR_IPC/i, 'the reactor host is stopped, not restarted');
    t.equal(p.stderr(), '', 'nothing on standard error');
    t.notOk(existsSync(pidFile), 'the pid file is removed');
  });
}

t.test('workers: SIGTERM to the process group stops the primary, every worker and their reactor hosts without an error line', async (t) => {
  const dir = clone('workers', (y) => y.replace(/^  workers: 1 /m, '  workers: 2 '));
  const p = run(dir, []);
  await waitFor(() => lines(p.stdout()).find((l) => l.msg === 'tokenproxy listening'), { timeoutMs: 90_000, what: `listening:\n${p.stdout()}${p.stderr()}` });
  t.equal(lines(p.stdout()).filter((l) => typeof l.msg === 'string' && l.msg.startsWith('development mode:')).length, 1, 'the notice once, not once per worker');
  process.kill(-p.child.pid!, 'SIGTERM');
  t.equal(await p.exited, 0, 'exit 0');
  t.same(lines(p.stdout()).filter((l) => (l.level ?? 0) >= 50).map((l) => l.msg), [], 'no error or fatal line');
  t.notMatch(p.stdout() + p.stderr(), /reactor host died|restarting|IPC channel|ERR_IPC/i, 'nothing is restarted');
  t.notOk(existsSync(join(dir, 'data/tokenproxy.pid')), 'the pid file is removed');
});

const OWN_KEY = 'tp_private_first_hour_operator_key_0001';
const MASTER_KEY = Buffer.alloc(32, 9).toString('base64');
const sha = (k: string) => createHash('sha256').update(k).digest('hex');

/** A config file of its own in `dir` (JSON is YAML), with one application holding `keys`. */
function ownConfig(dir: string, keys: unknown[], extra: Record<string, unknown> = {}): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'tokenproxy.json');
  writeFileSync(file, JSON.stringify({
    store: { kind: 'embedded', path: './data/tokens.db' },
    tenants: [{
      id: '7f1c6b3e-0d2a-4c59-9a4e-3b8d2f6a1c10', name: 't',
      applications: [{ id: '0b7d5c2a-9e41-4f3b-8c6d-1a2b3c4d5e6f', name: 'a', type: 'private', keys, permissions: ['token:create'] }],
    }],
    ...extra,
  }));
  return file;
}

t.test('production mode: each refusal is its own line on stderr, exit 1, and nothing is created', async (t) => {
  const cases: Array<{ name: string; keys: unknown[]; extra?: Record<string, unknown>; env: Record<string, string>; line: (dir: string) => string }> = [
    {
      name: 'no-master-key', keys: [{ sha256: sha(OWN_KEY) }], env: { NODE_ENV: 'production' },
      line: (dir) => `tokenproxy: production mode refuses to start: no master key: set TOKENPROXY_MASTER_KEY or secrets.master_key_file (tokenproxy gen-master-key makes one); the development key ${join(dir, 'data/master.key')} is for development only`,
    },
    {
      // server.mode alone (no NODE_ENV) is production too.
      name: 'key-file-inside', keys: [{ sha256: sha(OWN_KEY) }], extra: { server: { mode: 'production' }, secrets: { master_key_file: './data/master.key' } }, env: {},
      line: (dir) => `tokenproxy: production mode refuses to start: secrets.master_key_file ./data/master.key is inside the store's data directory ${join(dir, 'data')}: keep the master key outside it, so a copy of the data never carries its key`,
    },
    {
      name: 'published-digest', keys: [{ sha256: sha('key_dev_private_change_me_0000000000') }], env: { NODE_ENV: 'production', TOKENPROXY_MASTER_KEY: MASTER_KEY },
      line: () => 'tokenproxy: production mode refuses to start: tenants[0].applications[0].keys[0] is a development key published in the README and the default config: make your own (tokenproxy gen-key --type private|public|proxy) and list their digests',
    },
  ];
  for (const c of cases) {
    const dir = join(base, `refuse-${c.name}`);
    const p = run(dir, ['--config', ownConfig(dir, c.keys, c.extra)], c.env);
    t.equal(await p.exited, 1, `${c.name}: exit 1`);
    t.same(p.stderr().split('\n'), [c.line(dir), ''], `${c.name}: exactly its line`);
    t.equal(p.stdout(), '', `${c.name}: nothing on standard output`);
    t.notOk(existsSync(join(dir, 'data')), `${c.name}: no data directory was created`);
  }
});

t.test('production mode: its warnings once; server.admin serves /metrics and the public listener answers 404 there', async (t) => {
  const warned = join(base, 'warned');
  const a = run(warned, ['--config', ownConfig(warned, [OWN_KEY])], { NODE_ENV: 'production', TOKENPROXY_MASTER_KEY: MASTER_KEY });
  const upA = await waitFor(() => lines(a.stdout()).find((l) => l.msg === 'tokenproxy listening'), { timeoutMs: 60_000, what: `listening:\n${a.stdout()}${a.stderr()}` });
  t.same(lines(a.stdout()).filter((l) => l.level === 40).map((l) => [l.mode, l.msg]), [
    ['production', 'tenants[0].applications[0].keys[0] is a key given in plaintext: list the digest instead ({ sha256: "…" }, key_sha256; tokenproxy hash-key prints it), so the config file holds no usable key'],
    ['production', '/metrics is served on the public listener (server.port) without metrics.token: set server.admin to serve it on a loopback listener of its own'],
  ], 'each warning once, and nothing else warned');
  t.equal((await fetch(`${upA.url as string}/metrics`)).status, 200, 'without server.admin, /metrics stays on the public listener');
  t.notOk(a.stdout().includes(OWN_KEY) || a.stderr().includes(OWN_KEY), 'the key is not in the output');
  process.kill(-a.child.pid!, 'SIGTERM');
  t.equal(await a.exited, 0);

  const admin = join(base, 'admin');
  const b = run(admin, ['--config', ownConfig(admin, [{ sha256: sha(OWN_KEY) }], { server: { admin: { port: 0 } } })], { NODE_ENV: 'production', TOKENPROXY_MASTER_KEY: MASTER_KEY });
  const upB = await waitFor(() => lines(b.stdout()).find((l) => l.msg === 'tokenproxy listening'), { timeoutMs: 60_000, what: `listening:\n${b.stdout()}${b.stderr()}` });
  t.same(lines(b.stdout()).filter((l) => (l.level ?? 0) >= 40), [], 'a clean production config: no warning');
  const metricsUrl = upB.metrics as string;
  t.match(metricsUrl, /^http:\/\/127\.0\.0\.1:\d+$/, 'the admin listener is on loopback by default');
  const scraped = await fetch(`${metricsUrl}/metrics`);
  t.equal(scraped.status, 200, '/metrics on the admin listener');
  t.match(await scraped.text(), /tokenproxy_http_request_duration_seconds/);
  const pub = await fetch(`${upB.url as string}/metrics`);
  t.equal(pub.status, 404, 'the public listener does not serve it');
  t.equal(((await pub.json()) as { code: string }).code, 'route_not_found');

  // A reload that brings a published key in is refused like a start, and the key stays unknown.
  const DEV_KEY = 'key_dev_private_change_me_0000000000';
  ownConfig(admin, [{ sha256: sha(OWN_KEY) }, DEV_KEY], { server: { admin: { port: 0 } } });
  process.kill(b.child.pid!, 'SIGHUP');
  const refused = await waitFor(() => lines(b.stdout()).find((l) => typeof l.msg === 'string' && l.msg.startsWith('reload refused')), { timeoutMs: 30_000, what: `reload refused:\n${b.stdout()}` });
  t.same(refused.problems, ['production mode: tenants[0].applications[0].keys[1] is a development key published in the README and the default config: make your own (tokenproxy gen-key --type private|public|proxy) and list their digests']);
  const tried = await fetch(`${upB.url as string}/tokens`, { headers: { 'svc-api-key': DEV_KEY } });
  t.equal(tried.status, 401, 'the published key is not accepted');
  await tried.text();
  t.notOk(b.stdout().includes(DEV_KEY), 'and not logged');
  process.kill(-b.child.pid!, 'SIGTERM');
  t.equal(await b.exited, 0);
});
