/**
 * Production mode (issue 29, src/production.ts): what it refuses and warns about, what
 * development mode says instead, how NODE_ENV and server.mode combine, server.admin against
 * metrics.port, and that the list of published development keys covers every key the shipped
 * configs and the documentation show. The child-process side (the exact lines on stderr, the
 * exit code, the warnings once) is first-hour.test.ts and production-mode.test.ts.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256 } from '../../src/auth/keys.js';
import { adminListener } from '../../src/config/admin.js';
import { buildConfig, ConfigError, loadConfigFile } from '../../src/config/load.js';
import { PUBLISHED_DEV_KEYS, productionCheck, startupNotices } from '../../src/production.js';

const dir = mkdtempSync(join(tmpdir(), 'tp-production-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const OWN_KEY = 'tp_private_an_own_key_of_the_operator';
const TENANT = '7f1c6b3e-0d2a-4c59-9a4e-3b8d2f6a1c10';
const APP = '0b7d5c2a-9e41-4f3b-8c6d-1a2b3c4d5e6f';
const digest = (k: string) => sha256(k).toString('hex');

/** A config with one application holding `keys`, a store under `dir`, and the given extras. */
function config(keys: unknown[], extra: Record<string, unknown> = {}, env: NodeJS.ProcessEnv = { TOKENPROXY_MASTER_KEY: 'x' }) {
  return buildConfig({
    store: { kind: 'embedded', path: join(dir, 'data/tokens.db') },
    metrics: { token: { sha256: digest('a-metrics-token-of-16+') } },
    server: { admin: { port: 0 } },
    tenants: [{ id: TENANT, name: 't', applications: [{ id: APP, name: 'a', type: 'private', keys }] }],
    ...extra,
  }, { env });
}

t.test('a clean production config: no refusal, no warning', async (t) => {
  t.same(productionCheck(config([{ sha256: digest(OWN_KEY) }]), dir), { refusals: [], warnings: [] });
});

t.test('no master key: refused, naming the development key it would have used', async (t) => {
  const cfg = config([{ sha256: digest(OWN_KEY) }], {}, {});
  t.same(productionCheck(cfg, dir).refusals, [
    `no master key: set TOKENPROXY_MASTER_KEY or secrets.master_key_file (tokenproxy gen-master-key makes one); the development key ${join(dir, 'data/master.key')} is for development only`,
  ]);
  const redis = config([{ sha256: digest(OWN_KEY) }], { store: { kind: 'redis' } }, {});
  t.same(productionCheck(redis, dir).refusals, ['no master key: set TOKENPROXY_MASTER_KEY or secrets.master_key_file (tokenproxy gen-master-key makes one)'], 'a shared store has no development key to name');
});

t.test('a master key file inside the store\'s data directory is refused; outside it, or with the key in the environment, it is not', async (t) => {
  const inside = config([{ sha256: digest(OWN_KEY) }], { secrets: { master_key_file: 'data/keys/master.key' } }, {});
  t.same(productionCheck(inside, dir).refusals, [
    `secrets.master_key_file data/keys/master.key is inside the store's data directory ${join(dir, 'data')}: keep the master key outside it, so a copy of the data never carries its key`,
  ]);
  const outside = config([{ sha256: digest(OWN_KEY) }], { secrets: { master_key_file: 'secrets/master.key' } }, {});
  t.same(productionCheck(outside, dir).refusals, [], 'a sibling directory is outside');
  const sibling = config([{ sha256: digest(OWN_KEY) }], { secrets: { master_key_file: 'data-keys/master.key' } }, {});
  t.same(productionCheck(sibling, dir).refusals, [], 'a directory whose name only starts like it is outside');
  const envWins = config([{ sha256: digest(OWN_KEY) }], { secrets: { master_key_file: 'data/master.key' } });
  t.same(productionCheck(envWins, dir).refusals, [], 'TOKENPROXY_MASTER_KEY wins over the file, which is then not used');
  // A link from outside into the data directory is inside.
  mkdirSync(join(dir, 'data'), { recursive: true });
  symlinkSync(join(dir, 'data'), join(dir, 'linked'));
  const linked = config([{ sha256: digest(OWN_KEY) }], { secrets: { master_key_file: 'linked/master.key' } }, {});
  t.equal(productionCheck(linked, dir).refusals.length, 1, 'a path through a symbolic link into the data directory is refused');
});

t.test('a published development key is refused, given in plaintext or as its digest, in an application, a proxy or the metrics token', async (t) => {
  const [priv, pub, proxy] = PUBLISHED_DEV_KEYS as [string, string, string];
  const cfg = config([priv, { sha256: digest(pub).toUpperCase() }, OWN_KEY]);
  t.same(productionCheck(cfg, dir).refusals, [
    'tenants[0].applications[0].keys[0] and tenants[0].applications[0].keys[1] are development keys published in the README and the default config: make your own (tokenproxy gen-key --type private|public|proxy) and list their digests',
  ]);
  const withProxy = buildConfig({
    store: { kind: 'embedded', path: join(dir, 'data/tokens.db') },
    server: { admin: { port: 0 } },
    metrics: { token: proxy },
    tenants: [{ id: TENANT, name: 't', proxies: [{ id: 'p', name: 'p', key_sha256: digest(proxy), destination_url: 'http://127.0.0.1:9/' }] }],
  }, { env: { TOKENPROXY_MASTER_KEY: 'x' } });
  t.same(productionCheck(withProxy, dir).refusals, [
    'tenants[0].proxies[0].key_sha256 and metrics.token are development keys published in the README and the default config: make your own (tokenproxy gen-key --type private|public|proxy) and list their digests',
  ]);
  const one = config([priv]);
  t.match(productionCheck(one, dir).refusals[0], /^tenants\[0\]\.applications\[0\]\.keys\[0\] is a development key published/);
});

t.test('warnings: keys in plaintext, and /metrics on the public listener', async (t) => {
  const cfg = buildConfig({
    store: { kind: 'embedded', path: join(dir, 'data/tokens.db') },
    tenants: [{ id: TENANT, name: 't', applications: [{ id: APP, name: 'a', type: 'private', keys: [OWN_KEY, { sha256: digest('x'.repeat(20)) }] }] }],
  }, { env: { TOKENPROXY_MASTER_KEY: 'x' } });
  const { refusals, warnings } = productionCheck(cfg, dir);
  t.same(refusals, []);
  t.same(warnings, [
    'tenants[0].applications[0].keys[0] is a key given in plaintext: list the digest instead ({ sha256: "…" }, key_sha256; tokenproxy hash-key prints it), so the config file holds no usable key',
    '/metrics is served on the public listener (server.port) without metrics.token: set server.admin to serve it on a loopback listener of its own',
  ]);
  const many = config(Array.from({ length: 6 }, (_, i) => `${OWN_KEY}_${i}`));
  const cut = productionCheck(many, dir).warnings[0]!;
  t.match(cut, /^tenants\[0\]\.applications\[0\]\.keys\[0\], .*keys\[3\] and 2 more are keys given in plaintext/, 'a long list is cut');
  t.notMatch(cut, /keys\[4\]/);
  const oldSpelling = buildConfig({ metrics: { port: 0 } }, { env: { TOKENPROXY_MASTER_KEY: 'x' } });
  t.same(productionCheck(oldSpelling, dir).warnings, [], 'metrics.port is a listener of its own too');
  const off = buildConfig({ metrics: { enabled: false } }, { env: { TOKENPROXY_MASTER_KEY: 'x' } });
  t.same(productionCheck(off, dir).warnings, [], 'no /metrics, no warning');
  for (const text of [...refusals, ...warnings, ...productionCheck(config([...PUBLISHED_DEV_KEYS]), dir).refusals]) {
    t.notOk(text.includes(OWN_KEY) || PUBLISHED_DEV_KEYS.some((k) => text.includes(k) || text.includes(digest(k))), 'no key or digest in a message');
  }
});

t.test('start-up notices: development names what production would refuse, once; production logs its warnings', async (t) => {
  const check = { refusals: ['a', 'b'], warnings: ['w'] };
  t.same(startupNotices('development', check), [{
    fields: { mode: 'development', would_refuse: ['a', 'b'] },
    msg: 'development mode: production mode (NODE_ENV=production or server.mode: production) would refuse to start with this configuration',
  }]);
  t.same(startupNotices('development', { refusals: [], warnings: ['w'] }), [], 'nothing to refuse: nothing said');
  t.same(startupNotices('production', check), [{ fields: { mode: 'production' }, msg: 'w' }]);
});

t.test('NODE_ENV=production turns production mode on and never off; the default is development', async (t) => {
  t.equal(buildConfig({}, { env: {} }).server.mode, 'development');
  t.equal(buildConfig({}, { env: { NODE_ENV: 'production' } }).server.mode, 'production');
  t.equal(buildConfig({ server: { mode: 'production' } }, { env: { NODE_ENV: 'development' } }).server.mode, 'production');
  t.equal(buildConfig({ server: { mode: 'development' } }, { env: { NODE_ENV: 'production' } }).server.mode, 'production');
  t.throws(() => buildConfig({ server: { mode: 'prod' } }, { env: {} }), ConfigError);
});

t.test('server.admin: loopback by default; metrics.port is its older spelling; both, or the public port, are refused', async (t) => {
  t.same(adminListener(buildConfig({ server: { admin: { port: 9464 } } }, { env: {} })), { host: '127.0.0.1', port: 9464, from: 'server.admin' });
  t.same(adminListener(buildConfig({ server: { host: '10.0.0.5' }, metrics: { port: 9464 } }, { env: {} })), { host: '10.0.0.5', port: 9464, from: 'metrics.port' });
  t.equal(adminListener(buildConfig({}, { env: {} })), null);
  const problems = (raw: unknown): string[] => {
    try {
      buildConfig(raw, { env: {} });
      return [];
    } catch (e) {
      if (e instanceof ConfigError) return e.problems;
      throw e;
    }
  };
  t.same(problems({ server: { admin: { port: 9464 } }, metrics: { port: 9465 } }), ['metrics.port: give server.admin (host, port) or metrics.port/metrics.host, not both; metrics.port is the older spelling of server.admin']);
  t.same(problems({ server: { port: 8080, admin: { port: 8080 } } }), ['server.admin.port: must differ from server.port (a separate listener for /metrics); leave it out to serve /metrics on server.port']);
  t.same(problems({ server: { host: '0.0.0.0', port: 8080, admin: { port: 8080 } } }), ['server.admin.port: must differ from server.port (a separate listener for /metrics); leave it out to serve /metrics on server.port'], 'loopback and every address share the port');
  t.same(problems({ server: { port: 8080, admin: { port: 9464 } } }), []);
});

t.test('every key the shipped configs and the documentation show is in the published list', async (t) => {
  const files = ['config/tokenproxy.yaml', 'config/compose.yaml', 'README.md', 'SECURITY.md', 'scripts/smoke.mjs',
    ...readdirSync('docs').filter((f) => f.endsWith('.md')).map((f) => join('docs', f))];
  const shown = new Set<string>();
  for (const f of files) {
    for (const m of readFileSync(f, 'utf8').matchAll(/\b(?:key|proxy)_dev_[A-Za-z0-9_]+/g)) shown.add(m[0]);
  }
  t.ok(shown.size >= 3, 'the scan finds the keys');
  t.same([...shown].filter((k) => !PUBLISHED_DEV_KEYS.includes(k)), [], 'none missing from PUBLISHED_DEV_KEYS');
  // And every key the default configs hold, whatever it looks like.
  for (const f of ['config/tokenproxy.yaml', 'config/compose.yaml']) {
    const cfg = loadConfigFile({ path: f, env: {} });
    const keys = cfg.tenants.flatMap((x) => [...x.applications.flatMap((a) => a.keys), ...x.proxies.map((p) => p.key ?? p.key_sha256)]);
    for (const k of keys) t.ok(typeof k === 'string' && PUBLISHED_DEV_KEYS.includes(k), `${f}: a key it holds is listed`);
  }
});

t.test('npm start builds only when a source is newer than the last successful build', async (t) => {
  const { needsBuild, newestMtime, buildDecision, STAMP } = await import('../../scripts/build-if-stale.mjs');
  t.equal(needsBuild(1000, null), true, 'never built');
  t.equal(needsBuild(2000, 1000), true, 'a source changed after the build');
  t.equal(needsBuild(1000, 1000), false, 'nothing changed since');
  t.equal(needsBuild(500, 1000), false, 'everything older than the build');
  t.equal(needsBuild(null, 1000), true, 'no sources found: build (and let tsc say why)');

  const root = join(dir, 'checkout');
  mkdirSync(join(root, 'src/api'), { recursive: true });
  mkdirSync(join(root, 'dist'), { recursive: true });
  const at = (path: string, s: number) => {
    writeFileSync(join(root, path), '');
    utimesSync(join(root, path), s, s);
  };
  at('src/main.ts', 1000);
  at('src/api/tokens.ts', 1500);
  at('tsconfig.json', 900);
  t.equal(newestMtime(root), 1500 * 1000, 'the newest file anywhere under src/');
  t.same(buildDecision(root), { build: true, reason: 'no successful build yet' });
  at(STAMP, 2000);
  t.same(buildDecision(root), { build: false, reason: 'dist/ is up to date' });
  at('src/api/tokens.ts', 2500);
  t.same(buildDecision(root), { build: true, reason: 'sources changed since the last build' });
  at(STAMP, 3000);
  at('tsconfig.build.json', 3500);
  t.equal(buildDecision(root).build, true, 'a changed TypeScript setting rebuilds too');
});

t.test('check-config in production mode says what production mode refuses, exit 1; in development mode the same file is OK', async (t) => {
  const { runCli } = await import('../../src/cli.js');
  const check = async (mode: string): Promise<{ code: number | null; out: string; err: string }> => {
    const file = join(dir, `check-${mode}.json`);
    writeFileSync(file, JSON.stringify({
      server: { mode, admin: { port: 0 } },
      store: { kind: 'embedded', path: join(dir, `check-${mode}/tokens.db`) },
      secrets: { master_key_file: join(dir, `check-${mode}/master.key`) },
      tenants: [{ id: TENANT, name: 't', applications: [{ id: APP, name: 'a', type: 'private', keys: [{ sha256: digest(OWN_KEY) }] }] }],
    }));
    let out = '';
    let err = '';
    const code = await runCli(['check-config', '--config', file], { out: (x) => void (out += x), err: (x) => void (err += x), stdin: () => '' });
    return { code, out, err };
  };
  const prod = await check('production');
  t.equal(prod.code, 1);
  t.same(prod.err.split('\n'), [
    `tokenproxy: production mode refuses to start: secrets.master_key_file ${join(dir, 'check-production/master.key')} is inside the store's data directory ${join(dir, 'check-production')}: keep the master key outside it, so a copy of the data never carries its key`,
    '',
  ]);
  t.equal(prod.out, '');
  const dev = await check('development');
  t.equal(dev.code, 0, dev.err);
  t.match(dev.out, /: OK \(1 tenant/);
});
