/**
 * The compile step (src/model/compile.ts, issue 25): one pass from a loaded config to the model or
 * every problem; the model holds domain objects (sorted access rules, key digests, compiled
 * proxies without their config, reactor definitions, the egress policy with its CA files loaded,
 * the request limits with their defaults resolved). The HTTP paths that use the model are tested
 * where they live (test/proxy/, test/auth/, test/server/reload*.test.ts).
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { grant } from '../../src/auth/access.js';
import { buildConfig, ConfigError } from '../../src/config/load.js';
import { buildModel, compile, type Model } from '../../src/model/compile.js';

const TENANT = '33333333-3333-4333-8333-333333333333';
const APP = '44444444-4444-4444-8444-444444444444';
const API_KEY = 'compile_test_api_key_0000000000';
const PROXY_KEY = 'compile_test_proxy_key_000000000';
const PEM = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';

function raw(extra: Record<string, unknown> = {}, server: Record<string, unknown> = {}) {
  return {
    server,
    tenants: [{
      id: TENANT,
      name: 'compile',
      applications: [{
        id: APP, name: 'app', type: 'private', keys: [API_KEY], permissions: [],
        // Out of priority order on purpose: the compiler sorts them.
        rules: [
          { priority: 20, container: '/', permissions: ['token:read', 'token:search'], transform: 'mask' },
          { priority: 10, container: '/pci/', permissions: ['token:read'], transform: 'reveal' },
        ],
      }],
      reactors: [{ id: 'r1', name: 'r', code: 'module.exports = async () => ({ raw: 1 });' }],
      proxies: [{
        id: 'p1', name: 'p', key: PROXY_KEY, destination_url: 'https://user:secret@upstream.example/base?token=abc',
        request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/card/number', token: { type: 'token' } }] }],
        response_transforms: [{ type: 'code', code: 'module.exports = async (r) => r;' }],
      }],
      ...extra,
    }],
  };
}

function model(cfg: unknown): Model {
  const compiled = compile(buildConfig(cfg, { env: {} }));
  if (Array.isArray(compiled)) throw new Error(`unexpected problems: ${compiled.join('; ')}`);
  return compiled;
}

t.test('compile returns the model, or every problem as a value (not thrown)', async (t) => {
  t.notOk(Array.isArray(compile(buildConfig(raw(), { env: {} }))), 'a valid config compiles');
  const bad = raw({
    custom_rate_limits: { no_such_rule: { points: 1 } },
    outbound: { allowed_destinations: ['https://*'] },
    proxies: [{ id: 'p1', name: 'p', key: PROXY_KEY, destination_url: 'https://upstream.example', request_transforms: [{ type: 'tokenize', fields: [{ pointer: 'no-slash', token: { type: 'token' } }] }] }],
  }, { trust_proxy: ['not-a-cidr'] });
  const problems = compile(buildConfig(bad, { env: {} }));
  t.ok(Array.isArray(problems), 'problems, not a model');
  const lines = problems as string[];
  t.equal(lines.length, 4, lines.join('\n'));
  t.match(lines[0], /^server\.trust_proxy\[0\]: not an IP address or CIDR$/, 'server section first');
  t.match(lines[1], /^tenants\[0\]\.custom_rate_limits: unknown rate-limit rule "no_such_rule"/);
  t.match(lines[2], /^tenants\[0\]\.outbound\.allowed_destinations\[0\]: a wildcard needs a fixed domain/);
  t.match(lines[3], /^tenants\[0\]\.proxies\[0\]\.request_transforms\[0\]\.fields\[0\]\.pointer: not a valid JSON pointer/);
});

t.test("the loader's problems and the compiler's are one ConfigError, the loader's first", async (t) => {
  const cfg = raw({ reactors: [{ id: 'r1', name: 'r', code: 'x' }, { id: 'r1', name: 'again', code: 'x' }] }, { trust_proxy: ['nope'] });
  const err = t.throws(() => buildModel(cfg, { env: {} })) as unknown;
  t.ok(err instanceof ConfigError);
  t.same((err as ConfigError).problems, ['tenants[0].reactors[1].id: duplicate reactor id "r1"', 'server.trust_proxy[0]: not an IP address or CIDR']);
});

t.test('an application: access rules sorted at compile time, no key', async (t) => {
  const m = model(raw());
  const app = m.keys.findApiKey(API_KEY)!.app;
  t.same(app.rules.map((r) => r.priority), [10, 20], 'sorted by priority once, at compile');
  t.ok(Object.isFrozen(app) && Object.isFrozen(app.rules), 'frozen');
  t.notOk('keys' in app, 'the application holds no key');
  t.equal(grant(app, 'token:read', '/pci/x/'), 'reveal', 'the lower priority decides first');
  t.equal(grant(app, 'token:read', '/other/'), 'mask');
  t.same(app.searchScope, [{ prefix: '/pci/', allow: false }, { prefix: '/', allow: true }], 'the search scope computed at compile');
  t.equal(m.keys.findApiKey(API_KEY)!.tenant, m.tenants[0], 'the principal names the compiled tenant');
});

t.test('a proxy: compiled without its config; its definitions and the reactors in the model', async (t) => {
  const m = model(raw());
  const proxy = m.proxies.get(`${TENANT}/p1`)!;
  t.notOk('config' in proxy, 'no config object');
  t.equal(proxy.settings.destination_url, 'https://upstream.example/base', 'credentials and query never kept for display');
  t.same(proxy.request[0], { kind: 'tokenize', identifier: undefined, fields: [{ segments: ['card', 'number'], label: 'card.number', token: { type: 'token' } }] });
  t.equal(proxy.destination.origin, 'https://upstream.example', 'the destination parsed');
  t.equal(m.keys.findProxyKey(PROXY_KEY)!.proxy, proxy.settings, 'the proxy key names the compiled settings');
  t.same(m.reactors.map((d) => d.key), [`${TENANT}/reactor/r1`, `${TENANT}/proxy/p1/response/0`], "the tenants' reactors, then the code transforms");
  t.equal(m.tenants[0]!.reactors[0]!.key, `${TENANT}/reactor/r1`, 'the route finds the host key on the tenant');
  t.match(proxy, { buffered: true, transformsAnswer: true, upgradable: false }, 'its path chosen at compile: transforms both ways');
  const plain = model(raw({ proxies: [{ id: 'p2', name: 'p', key: PROXY_KEY, destination_url: 'https://upstream.example' }] })).proxies.get(`${TENANT}/p2`)!;
  t.match(plain, { buffered: false, transformsAnswer: false, upgradable: true }, 'a plain proxy streams both ways');
  const blocking = model(raw({ proxies: [{ id: 'p3', name: 'p', key: PROXY_KEY, destination_url: 'https://upstream.example', leak_guard: 'block' }] })).proxies.get(`${TENANT}/p3`)!;
  t.match(blocking, { buffered: true, transformsAnswer: false, upgradable: false }, 'a blocking leak guard reads the body first');
});

t.test('the egress policy holds its CA file as read at compile (read once)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tp-compile-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const ca = join(dir, 'ca.pem');
  writeFileSync(ca, PEM);
  const m = model(raw({ outbound: { allowed_destinations: [{ origin: 'https://api.example.com', tls: { ca_file: ca } }] } }));
  rmSync(ca);
  t.teardown(() => m.egress.close());
  t.equal(m.egress.byTenant.get(TENANT)![0]!.ca, PEM, 'the PEM is in the model; the file is not needed again');
  t.doesNotThrow(() => m.egress.match(TENANT, new URL('https://api.example.com/x')), 'the policy serves from the model');
});

t.test('request limits: one source of defaults', async (t) => {
  t.same(model(raw({}, { body_limit_bytes: 1000 })).limits, { bodyLimitBytes: 1000, maxDepth: 64, lingerTimeMs: 5000, lingerMaxBytes: 2000 });
  t.equal(model(raw({}, { body_limit_bytes: 1000, lingering_max_bytes: 10 })).limits.lingerMaxBytes, 10);
});

t.test("a tenant's rate-limit table: its tier's rules with its overrides, built at compile", async (t) => {
  const m = model(raw({ custom_rate_limits: { private_key: { points: 7, duration_seconds: 30 } } }));
  const table = m.tenants[0]!.rateTable;
  t.ok(Object.isFrozen(table), 'frozen');
  t.match(table.find((r) => r.name === 'private_key'), { limits: { points: 7, durationSeconds: 30 } }, 'the override merged');
  t.ok(table.find((r) => r.name === 'creating_tokens'), "the tier's other rules are in the table");
});
