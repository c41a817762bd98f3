/**
 * Issue 29, production mode: each refusal at start-up is one line on stderr with exit 1 and creates
 * nothing; a production start warns once for each risky setting; server.admin moves /metrics to a
 * loopback listener of its own; a reload that brings a published key in is refused like a start.
 * (Split from first-hour.test.ts, which runs the shipped config, to keep each file well inside
 * the runner's per-file timeout on a loaded machine.)
 */
import t from 'tap';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from '../helpers/wait.js';
import { lines, MASTER_KEY, OWN_KEY, ownConfig, run as runIn, scratch, sha } from '../helpers/first-hour.js';

const base = scratch(t);
const run = (cwd: string, args: string[], extra: Record<string, string> = {}) => runIn(t, cwd, args, extra);

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
