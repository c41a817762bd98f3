/**
 * Issue 31 finding 7: the CLI commands that read a store never create one. Run as child processes
 * from chosen working directories: a relative `store.path` is resolved against the working
 * directory by the service and by the commands alike; from another directory `verify-audit`,
 * `rotate-data-key` and `migrate` (issue 24) exit 1 naming the path they looked at, and create neither the file, its
 * directory nor a development master key; an unknown tenant or one without a chain head exits 2
 * naming it.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { call, KEYS, TENANT_A, TENANT_B, baseConfig } from '../helpers/service.js';

t.setTimeout(300_000);

const root = mkdtempSync(join(tmpdir(), 'tp-store-commands-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const MAIN = resolve('src/main.ts');
const loader = process.execArgv.filter((a) => !a.startsWith('--inspect'));

/** The test's environment without TOKENPROXY_MASTER_KEY, plus `env`. */
function envWith(env: Record<string, string>): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = { ...process.env, ...env };
  if (!('TOKENPROXY_MASTER_KEY' in env)) delete out.TOKENPROXY_MASTER_KEY;
  return out;
}

function cli(cwd: string, args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; out: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [...loader, MAIN, ...args], { cwd, env: envWith(env), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('exit', (code) => done({ code, out }));
  });
}

/** The service as a child process in `cwd`; resolves with its URL once it listens, and a stop function. */
function service(cwd: string, config: string, env: Record<string, string>): Promise<{ url: string; stop: () => Promise<void> }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [...loader, MAIN, '--config', config], { cwd, env: envWith({ ...env, PORT: '0' }), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const onData = (d: Buffer) => {
      out += d;
      const m = /"url":"(http:\/\/[^"]+)"[^\n]*tokenproxy listening/.exec(out);
      if (m) {
        child.stdout.off('data', onData);
        child.removeAllListeners('exit');
        done({
          url: m[1]!,
          stop: () => new Promise<void>((r) => {
            child.once('exit', () => r());
            child.kill('SIGTERM');
          }),
        });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', (d: Buffer) => (out += d));
    child.on('exit', (code) => fail(new Error(`service exited with ${code}:\n${out}`)));
  });
}

const serviceDir = join(root, 'service');
const otherDir = join(root, 'elsewhere');
mkdirSync(serviceDir);
mkdirSync(otherDir);
const config = join(root, 'tokenproxy.json');
writeFileSync(config, JSON.stringify({ ...baseConfig(), store: { kind: 'embedded', path: './data/tokens.db' } }));
const masterKey = randomBytes(32).toString('base64');

t.test('from another working directory: exit 1 naming the path, nothing created', async (t) => {
  for (const args of [['verify-audit', '--tenant', TENANT_A], ['rotate-data-key'], ['migrate']]) {
    for (const env of [{}, { TOKENPROXY_MASTER_KEY: masterKey }] as Array<Record<string, string>>) {
      const what = `${args[0]} (${'TOKENPROXY_MASTER_KEY' in env ? 'master key set' : 'no master key: a development key would be looked for'})`;
      const r = await cli(otherDir, [...args, '--config', config], env);
      t.equal(r.code, 1, `${what}: ${r.out}`);
      t.match(r.out, join(otherDir, 'data', 'tokens.db'), `${what}: names the path it looked at`);
      t.match(r.out, /relative to the working directory/, `${what}: says how a relative path resolves`);
      t.notMatch(r.out, /chain intact|data key rotated/, what);
      t.same(readdirSync(otherDir), [], `${what}: no file, no directory, no development key created`);
    }
  }
});

t.test('from the service\'s working directory: the store the service wrote; unknown tenants and tenants without a head exit 2', async (t) => {
  const svc = await service(serviceDir, config, { TOKENPROXY_MASTER_KEY: masterKey });
  try {
    const created = await call(svc.url, 'POST', '/tokens', { key: KEYS.private, body: { type: 'token', data: 'store-commands', containers: ['/general/'] } });
    t.equal(created.status, 201, created.text);
    t.equal((await call(svc.url, 'GET', `/tokens/${created.body.id as string}`, { key: KEYS.private })).status, 200);
  } finally {
    await svc.stop();
  }
  t.ok(existsSync(join(serviceDir, 'data', 'tokens.db')), 'the service put the relative path under its working directory');
  const env = { TOKENPROXY_MASTER_KEY: masterKey };

  const ok = await cli(serviceDir, ['verify-audit', '--tenant', TENANT_A, '--config', config], env);
  t.equal(ok.code, 0, ok.out);
  t.match(ok.out, /1 audit event\(s\), chain intact/, 'the command found the same store');

  const unknown = '99999999-aaaa-4bbb-8ccc-dddddddddddd';
  const u = await cli(serviceDir, ['verify-audit', '--tenant', unknown, '--config', config], env);
  t.equal(u.code, 2, u.out);
  t.match(u.out, unknown, 'names the unknown tenant');
  t.notMatch(u.out, /intact/);

  const b = await cli(serviceDir, ['verify-audit', '--tenant', TENANT_B, '--config', config], env);
  t.equal(b.code, 2, b.out);
  t.match(b.out, new RegExp(`${TENANT_B} has no audit chain head`), 'names the tenant without a head');

  const rotated = await cli(serviceDir, ['rotate-data-key', '--config', config], env);
  t.equal(rotated.code, 0, rotated.out);
  t.match(rotated.out, /data key rotated: k1 -> k2/, 'rotated the service\'s store');
  t.same(readdirSync(otherDir), [], 'still nothing elsewhere');
});
