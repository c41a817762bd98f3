/**
 * Issue 31 finding 6: the reactor host process (which runs tenant code) gets a minimal
 * environment, built from an allow-list: no master key, no store password, no other secret of the
 * service's environment. The real service runs as a child process with such variables set; the
 * test finds its reactor host among that process's children and reads /proc/<pid>/environ.
 */
import t from 'tap';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startChild, writeConfig } from '../helpers/process.js';
import { baseConfig } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

const linux = process.platform === 'linux';

/** The pids of the direct children of `pid` (every thread's list). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const text = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
    if (text) out.push(...text.split(/\s+/).map(Number));
  }
  return out;
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

t.test('the reactor host holds no secret of the service environment', { skip: linux ? false : '/proc is Linux only' }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tp-host-env-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const cfg = baseConfig() as { tenants: Array<Record<string, unknown>>; store?: unknown };
  cfg.store = { kind: 'embedded', path: join(dir, 'tokens.db') };
  cfg.tenants[0]!.reactors = [{ id: 'echo', name: 'echo', code: 'module.exports = async (req) => ({ raw: req.args });' }];
  const masterKey = randomBytes(32).toString('base64');
  const secrets = {
    TOKENPROXY_MASTER_KEY: masterKey,
    REDIS_PASSWORD: `redis-${randomBytes(8).toString('hex')}`,
    PGPASSWORD: `pg-${randomBytes(8).toString('hex')}`,
    DATABASE_URL: `postgres://u:${randomBytes(8).toString('hex')}@db/x`,
    SOME_API_TOKEN: `tok-${randomBytes(8).toString('hex')}`,
  };
  // The service and then its reactor host start under the test loader: slow on a loaded machine.
  const svc = await startChild(writeConfig(dir, cfg), secrets, 120_000);
  t.teardown(() => svc.kill9());
  const pid = svc.child.pid!;
  const host = await waitFor(() => childrenOf(pid).find((c) => /reactors[\\/]host\.(ts|js)/.test(cmdline(c))), { what: 'the reactor host process' });
  const environ = readFileSync(`/proc/${host}/environ`, 'utf8');
  const names = environ.split('\0').filter(Boolean).map((kv) => kv.slice(0, kv.indexOf('=')));
  t.ok(names.length > 0, `the host has an environment (${names.join(', ')})`);
  t.notOk(environ.includes(masterKey), 'no master key value');
  t.notOk(names.includes('TOKENPROXY_MASTER_KEY'), 'no TOKENPROXY_MASTER_KEY variable');
  for (const [name, value] of Object.entries(secrets)) {
    t.notOk(environ.includes(value), `no ${name} value`);
    t.notOk(names.includes(name), `no ${name} variable`);
  }
  // And the host still works with what it has.
  const r = await fetch(`${svc.url}/reactors/echo/react`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'svc-api-key': 'test_private_key_aaaaaaaaaaaaaaaa' },
    body: JSON.stringify({ args: { ok: 1 } }),
  });
  t.equal(r.status, 200);
  t.same(await r.json(), { raw: { ok: 1 }, tokens: null });
});
