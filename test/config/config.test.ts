/** Config: the shipped default validates, bad files name every bad path, limits are enforced. */
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildConfig, ConfigError, loadConfigFile } from '../../src/config/load.js';
import { buildModel } from '../../src/model/compile.js';

const tenant = (apps: unknown[], extra: Record<string, unknown> = {}) => ({
  tenants: [{ id: '7f1c6b3e-0d2a-4c59-9a4e-3b8d2f6a1c10', name: 'x', applications: apps, ...extra }],
});
const app = (extra: Record<string, unknown> = {}) => ({
  id: '0b7d5c2a-9e41-4f3b-8c6d-1a2b3c4d5e6f', name: 'a', type: 'private', keys: ['k'.repeat(20)], ...extra,
});

function problems(raw: unknown): string[] {
  try {
    buildModel(raw, { env: {} });
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  return [];
}

t.test('the shipped config/tokenproxy.yaml is valid and frozen', async (t) => {
  const cfg = loadConfigFile({ path: 'config/tokenproxy.yaml', env: {} });
  t.equal(cfg.store.kind, 'embedded');
  t.equal(cfg.server.body_limit_bytes, 5 * 1024 * 1024);
  t.ok(cfg.tenants.length >= 1);
  t.ok(Object.isFrozen(cfg.tenants[0]));
});

t.test('a bad permission is named by its path', async (t) => {
  const p = problems(tenant([app(), app({ id: '0b7d5c2a-9e41-4f3b-8c6d-1a2b3c4d5e60', keys: ['z'.repeat(20)], permissions: ['token:create', 'token:read', 'token:craete'] })]));
  t.same(p, ['tenants[0].applications[1].permissions[2]: unknown permission "token:craete"']);
});

t.test('several problems are all reported', async (t) => {
  const p = problems({ server: { port: 'x' }, store: { kind: 'disk' }, ...tenant([app({ type: 'public', permissions: ['token:read'] })]) });
  t.ok(p.some((m) => m.startsWith('server.port:')));
  t.ok(p.some((m) => m.startsWith('store.kind:')));
  const p2 = problems(tenant([app({ type: 'public', permissions: ['token:read'] })]));
  t.match(p2[0], /public application may hold only token:create, token:update/);
});

t.test('metrics.port equal to server.port is refused (also when PORT sets it); another port is accepted', async (t) => {
  t.same(problems({ server: { port: 8090 }, metrics: { port: 8090 } }), ['metrics.port: must differ from server.port (a separate listener for /metrics); leave it out to serve /metrics on server.port']);
  t.throws(() => buildConfig({ metrics: { port: 8091 } }, { env: { PORT: '8091' } }), ConfigError);
  t.equal(buildConfig({ server: { port: 8090 }, metrics: { port: 8091 } }, { env: {} }).metrics.port, 8091);
  t.equal(buildConfig({ server: { port: 0 }, metrics: { port: 0 } }, { env: {} }).metrics.port, 0, 'both 0: two free ports');
});

t.test('PORT and HOST override; a bad PORT is refused', async (t) => {
  const cfg = buildConfig({}, { env: { PORT: '9999', HOST: '0.0.0.0' } });
  t.equal(cfg.server.port, 9999);
  t.equal(cfg.server.host, '0.0.0.0');
  t.throws(() => buildConfig({}, { env: { PORT: 'abc' } }), ConfigError);
});

t.test('reactor code: length limit and code_file relative to the config file', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tp-cfg-'));
  t.teardown(() => {});
  writeFileSync(join(dir, 'ok.js'), 'module.exports = async () => ({ raw: 1 });');
  const reactor = (r: Record<string, unknown>) => tenant([], { reactors: [{ id: 'r1', name: 'r', ...r }] });
  writeFileSync(join(dir, 'c.yaml'), JSON.stringify(reactor({ code_file: 'ok.js' })));
  t.match(loadConfigFile({ path: join(dir, 'c.yaml'), env: {} }).tenants[0]!.reactors[0]!.code, /module.exports/);
  t.same(problems(reactor({ code: 'x'.repeat(50_000) })), []);
  t.match(problems(reactor({ code: 'x'.repeat(50_001) }))[0], /reactor "r1" is 50001 characters; the limit is 50000/);
  t.match(problems(reactor({}))[0], /exactly one of code and code_file/);
});

t.test('a missing or unparsable file is a ConfigError', async (t) => {
  t.throws(() => loadConfigFile({ path: '/nonexistent/x.yaml', env: {} }), ConfigError);
  const dir = mkdtempSync(join(tmpdir(), 'tp-cfg-'));
  writeFileSync(join(dir, 'bad.yaml'), 'server: [unclosed');
  t.throws(() => loadConfigFile({ path: join(dir, 'bad.yaml'), env: {} }), ConfigError);
});

t.test('proxy tokenize fields: expressions must depend on data, and deduplicate_token is refused', async (t) => {
  const proxy = (token: Record<string, unknown>) => ({
    id: 'p', name: 'p', key: 'proxy_key_0123456789abcdef', destination_url: 'http://127.0.0.1:9', require_auth: false,
    request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/card', token: { type: 'card', ...token } }] }],
  });
  const at = 'tenants[0].proxies[0].request_transforms[0].fields[0].token';
  t.same(problems(tenant([app()], { proxies: [proxy({ fingerprint_expression: '{{ data.number }}', search_indexes: ['{{ data.number | last4 }}'] })] })), []);
  const found = problems(tenant([app()], {
    proxies: [proxy({ fingerprint_expression: '{{ "4242424242424242" }}', mask: '{{ tokens }}', search_indexes: ['{{ data.number }}', 'constant'], deduplicate_token: true })],
  }));
  t.match(found.find((p) => p.startsWith(`${at}.fingerprint_expression:`)), /must depend on data/);
  t.match(found.find((p) => p.startsWith(`${at}.mask:`)), /may refer to data only/);
  t.match(found.find((p) => p.startsWith(`${at}.search_indexes[1]:`)), /must depend on data/);
  t.notOk(found.some((p) => p.startsWith(`${at}.search_indexes[0]:`)), 'a good index is not named');
  t.match(found.find((p) => p.startsWith(`${at}.deduplicate_token:`)), /not available in a proxy/);
  t.notOk(found.join('\n').includes('4242424242424242'), 'no problem echoes the expression text');
});

t.test('the checks of other modules join the loader\'s in one ConfigError', async (t) => {
  const p = problems({
    server: { trust_proxy: ['not-a-cidr'] },
    ...tenant([app({ type: 'public', permissions: ['token:read'] })], { custom_rate_limits: { no_such_rule: { points: 1 } } }),
  });
  t.ok(p.some((m) => m.startsWith('server.trust_proxy[0]: not an IP address or CIDR')), 'trust_proxy (http/client-ip)');
  t.ok(p.some((m) => m.startsWith('tenants[0].custom_rate_limits: unknown rate-limit rule')), 'rate-limit rule names (rate-limit/rules)');
  t.ok(p.some((m) => /public application may hold only/.test(m)), 'and the loader\'s own');
});

t.test('store.kind postgres (issue 24): url required and checked, pool_size, the password from TOKENPROXY_STORE_PASSWORD', async (t) => {
  t.same(problems({ store: { kind: 'postgres' } }), ['store.url: required when store.kind is postgres (postgres://user@host:port/database)']);
  const bad = problems({ store: { kind: 'postgres', url: 'redis://u:hunter2pw@h/0' } });
  t.same(bad, ['store.url: must start with postgres:// or postgresql:// when store.kind is postgres']);
  t.notOk(bad.join('\n').includes('hunter2pw'), 'the url (and its password) is not echoed');
  t.same(problems({ store: { kind: 'postgres', url: 'postgres://h/db', cluster: { nodes: ['h:1'] } } }), ['store: cluster and sentinel are Redis settings, not for store.kind postgres']);
  const ok = buildConfig({ store: { kind: 'postgres', url: 'postgresql://tp@db:5432/vault?sslmode=verify-full' } }, { env: {} });
  t.equal(ok.store.pool_size, 10, 'pool_size defaults to 10');
  t.equal(ok.store.password, undefined);
  t.match(problems({ store: { kind: 'postgres', url: 'postgres://h/db', pool_size: 0 } })[0], /^store\.pool_size:/);
  const fromEnv = buildConfig({ store: { kind: 'postgres', url: 'postgres://h/db', password: 'in-file' } }, { env: { TOKENPROXY_STORE_PASSWORD: 'from-env' } });
  t.equal(fromEnv.store.password, 'from-env', 'the environment wins over store.password');
  t.throws(() => buildConfig({ store: { kind: 'postgres', url: 'postgres://h/db' } }, { env: { TOKENPROXY_STORE_PASSWORD: '' } }), ConfigError, 'set but empty');
  const redis = buildConfig({ store: { kind: 'redis', password: 'r' } }, { env: { TOKENPROXY_STORE_PASSWORD: 'from-env' } });
  t.equal(redis.store.password, 'r', 'Redis does not take it');
});

t.test('rate_limits.store postgres (issue 24): needs store.kind postgres, takes no Redis settings, table is an identifier', async (t) => {
  const pgStore = { kind: 'postgres', url: 'postgres://h/db' };
  t.same(problems({ rate_limits: { store: 'postgres' } }), [
    "rate_limits.store: postgres counts in the token store's PostgreSQL database and needs store.kind: postgres (it is embedded); use memory or redis here",
  ], 'refused on the embedded store, naming what to do');
  t.match(problems({ store: { kind: 'redis' }, rate_limits: { store: 'postgres' } }), [/needs store\.kind: postgres \(it is redis\)/]);
  t.same(problems({ store: pgStore, rate_limits: { store: 'postgres', url: 'redis://x:6379', password: 'p' } }), [
    "rate_limits: url, password are Redis settings; rate_limits.store: postgres uses the token store's connection (store.url)",
  ]);
  t.same(problems({ rate_limits: { enabled: false, store: 'postgres' } }), [], 'limits off: nothing to check');
  const ok = buildConfig({ store: pgStore, rate_limits: { store: 'postgres' } }, { env: {} });
  t.equal(ok.rate_limits.table, 'rate_limits', 'table defaults to rate_limits');
  t.equal(buildConfig({ store: pgStore, rate_limits: { store: 'postgres', table: 'rl_staging' } }, { env: {} }).rate_limits.table, 'rl_staging');
  for (const bad of ['Rates', 'rl-x', '1rl', 'rl"; DROP TABLE x; --', 'a'.repeat(64)]) {
    t.match(problems({ store: pgStore, rate_limits: { store: 'postgres', table: bad } }), [/^rate_limits\.table: a lower-case SQL identifier/], `table ${JSON.stringify(bad.slice(0, 20))} refused`);
  }
});
