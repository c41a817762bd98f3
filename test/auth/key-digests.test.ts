/**
 * Issue 23 finding 8 (third bullet): the plaintext API and proxy keys of the config stayed
 * reachable from every Principal and compiled proxy after start-up. Once the config is compiled the
 * model holds digests only: nothing reachable from the model request handling reads (the config it
 * keeps, the key index, every Principal, every compiled proxy) holds a configured key, and the
 * keys still authenticate. The same holds for a model compiled by a reload.
 */
import t from 'tap';
import { hash } from 'node:crypto';
import { buildConfig } from '../../src/config/load.js';
import { applyLive } from '../../src/config/live.js';
import { compileOrThrow } from '../../src/model/compile.js';
import { KEYS, startTestService, TENANT_A } from '../helpers/service.js';
import { configWithProxies, PROXY_KEY, PROXY_KEY_B } from '../helpers/proxy.js';

/** Every string reachable from `root` through own properties, Map and Set entries (functions are not entered). */
function strings(root: unknown): string[] {
  const out: string[] = [];
  const seen = new Set<object>();
  const visit = (v: unknown, depth: number): void => {
    if (typeof v === 'string') {
      out.push(v);
      return;
    }
    if (typeof v !== 'object' || v === null || seen.has(v) || depth > 40) return;
    seen.add(v);
    if (Buffer.isBuffer(v)) return;
    if (v instanceof Map) {
      for (const [k, x] of v) {
        visit(k, depth + 1);
        visit(x, depth + 1);
      }
      return;
    }
    if (v instanceof Set) {
      for (const x of v) visit(x, depth + 1);
      return;
    }
    for (const name of Object.getOwnPropertyNames(v)) {
      const d = Object.getOwnPropertyDescriptor(v, name);
      if (d && 'value' in d) visit(d.value, depth + 1);
    }
  };
  visit(root, 0);
  return out;
}

const PLAIN = [KEYS.private, KEYS.public, KEYS.masked, KEYS.tenantB, KEYS.noPerm, PROXY_KEY, PROXY_KEY_B];
const proxy = (id: string, key: string) => ({ id, name: id, key, destination_url: 'http://127.0.0.1:9/', require_auth: false });

function rawConfig(): Record<string, unknown> {
  return configWithProxies([proxy('a', PROXY_KEY)], [proxy('b', PROXY_KEY_B)]);
}

function leaked(root: unknown): string[] {
  const all = strings(root);
  return PLAIN.filter((k) => all.some((s) => s.includes(k)));
}

t.test('the running model holds no configured key, and every key still authenticates', async (t) => {
  const s = await startTestService(t, { config: rawConfig() });
  const model = s.svc.model;
  t.same(leaked(model.config), [], 'the config the model keeps');
  t.same(leaked(model.keys), [], 'the key index');
  for (const key of [KEYS.private, KEYS.public, KEYS.masked, KEYS.tenantB, KEYS.noPerm]) {
    const p = model.keys.findApiKey(key);
    t.ok(p, 'the key resolves');
    t.same(leaked(p), [], 'its Principal holds no key');
  }
  for (const key of [PROXY_KEY, PROXY_KEY_B]) {
    const p = model.keys.findProxyKey(key);
    t.ok(p, 'the proxy key resolves');
    t.same(leaked(p), [], 'its principal holds no key');
  }
  for (const [id, compiled] of model.proxies) t.same(leaked(compiled), [], `compiled proxy ${id}`);
  t.same(leaked(model), [], 'the whole model');
  t.notOk(JSON.stringify(model.config).includes(PROXY_KEY), 'nor its JSON');

  // The digests are what the config holds now, and requests authenticate as before.
  const app = model.config.tenants[0]!.applications[0]!;
  t.same(app.keys, [{ sha256: hash('sha256', KEYS.private, 'hex') }]);
  t.equal(model.config.tenants[0]!.proxies[0]!.key_sha256, hash('sha256', PROXY_KEY, 'hex'));
  t.equal((await s.call('POST', '/tokens', { body: { type: 'token', data: 'x' } })).status, 201);
  t.equal((await s.call('GET', '/tokens', { key: KEYS.tenantB })).status, 200);
  t.equal((await s.call('GET', '/tokens', { key: 'not_a_key_0000000000000000' })).status, 401);
  const viaProxy = await fetch(`${s.url}/proxy/x`, { headers: { 'svc-proxy-key': PROXY_KEY } });
  await viaProxy.arrayBuffer();
  t.not(viaProxy.status, 401, 'the proxy key is accepted');
  t.not(viaProxy.status, 403);
});

t.test('a model compiled by a reload holds no configured key either', async (t) => {
  const running = compileOrThrow(buildConfig(rawConfig(), { env: {} }));
  const next = buildConfig(rawConfig(), { env: {} });
  const { config } = applyLive(running.config, next);
  const model = compileOrThrow(config);
  t.same(leaked(model), [], 'the reloaded model');
  t.ok(model.keys.findApiKey(KEYS.private), 'keys resolve');
  t.equal(model.keys.findApiKey(KEYS.private)!.tenant.id, TENANT_A);
  t.ok(model.keys.findProxyKey(PROXY_KEY_B));
});
