/**
 * The original service's Node SDK against the management reads (issue 28, test/helpers/sdk.ts for
 * the header prefix): a tenant with more applications, proxies and reactors than one page holds,
 * every list iterated to its end with `for await` (each item once, then it stops), each `get`,
 * `getByKey`, `tenants.self.get()`, `permissions.list()`; the writes the SDK has answer 405. The
 * raw answers are checked against the SDK's own response schemas with unknown keys refused, so a
 * field the original's clients do not know (or a missing one of the right type) fails here.
 */
import t from 'tap';
import { BasisTheoryError, serialization } from '@basis-theory/node-sdk';
import { APP_PRIVATE, baseConfig, KEYS, startTestService, TENANT_A } from '../helpers/service.js';
import { sdkClient } from '../helpers/sdk.js';

const COUNT = 25;
const MGMT_KEY = 'sdk_management_key_0123456789abcdef';
const APP_MGMT = 'aaaaaaaa-0000-4000-8000-0000000000c0';
const pad = (i: number) => String(i).padStart(2, '0');

function config(): Record<string, unknown> {
  const cfg = baseConfig() as any;
  const a = cfg.tenants[0];
  a.applications.push({ id: APP_MGMT, name: 'sdk-management', type: 'management', keys: [MGMT_KEY] });
  for (let i = 0; i < COUNT; i++) {
    a.applications.push({ id: `aaaaaaaa-0000-4000-8000-0000000010${pad(i)}`, name: `extra-${pad(i)}`, type: i % 2 ? 'private' : 'management', keys: [`sdk_extra_app_key_${pad(i)}_0123456789`] });
  }
  a.proxies = Array.from({ length: COUNT }, (_, i) => ({
    id: `proxy-${pad(i)}`, name: `proxy ${pad(i)}`, key: `sdk_proxy_key_${pad(i)}_0123456789`, destination_url: `https://p${pad(i)}.example/api`,
    ...(i === 0 ? { request_transforms: [{ type: 'tokenize', identifier: 'n', fields: [{ pointer: '/n', token: { type: 'token' } }] }], response_transforms: [{ type: 'mask', pattern: '(\\d+)' }] } : {}),
  }));
  a.reactors = Array.from({ length: COUNT }, (_, i) => ({
    id: `reactor-${pad(i)}`, name: `reactor ${pad(i)}`, memory_limit_mb: 8, configuration: { NAME: `value-${pad(i)}` },
    code: 'module.exports = async (req) => ({ raw: req.args });',
  }));
  return cfg;
}

const s = await startTestService(t, { config: config() });
const apps = (config() as any).tenants[0].applications as Array<{ id: string }>;

/** The SDK's own schema, strict: unknown keys fail, every present field must have its type. */
function strict(t: { ok(v: unknown, m: string): unknown }, schema: { parse(raw: unknown, opts: object): { ok: boolean; errors?: unknown } }, raw: unknown, what: string): void {
  const r = schema.parse(raw, { unrecognizedObjectKeys: 'fail', allowUnrecognizedUnionMembers: false, allowUnrecognizedEnumValues: false, skipValidation: false, breadcrumbsPrefix: ['response'] });
  t.ok(r.ok, `${what}: the SDK's schema accepts the raw answer${r.ok ? '' : ` (${JSON.stringify(r.errors)})`}`);
}

t.test('lists iterate to their end and stop, each item once', async (t) => {
  const { client, requests } = sdkClient(s.url, MGMT_KEY);
  const seen = async <T extends { id?: string }>(pages: AsyncIterable<T>): Promise<string[]> => {
    const out: string[] = [];
    for await (const x of pages) {
      out.push(x.id!);
      // An iterator that never ends (each page answered as the first: issue 28) fails here, not by timeout.
      if (out.length > 10 * COUNT) throw new Error('the iterator does not stop');
    }
    return out;
  };

  const appIds = await seen(await client.applications.list());
  t.equal(appIds.length, apps.length, `applications: ${apps.length}, more than one page of 20`);
  t.same(appIds, apps.map((a) => a.id), 'each once, in config order');
  t.equal(requests.filter((r) => /\/applications(\?|$)/.test(r.url)).length, 3, 'two full pages, then the empty one that stops it');

  const proxyIds = await seen(await client.proxies.list({ size: 7 }));
  t.equal(proxyIds.length, COUNT, 'proxies, 7 a page');
  t.equal(new Set(proxyIds).size, COUNT, 'no duplicates');
  t.equal(requests.filter((r) => /\/proxies(\?|$)/.test(r.url)).length, 5, 'four pages, then the empty one');

  const reactorIds = await seen(await client.reactors.list());
  t.same(reactorIds, Array.from({ length: COUNT }, (_, i) => `reactor-${pad(i)}`), 'reactors: each once');

  const privateIds = (config() as any).tenants[0].applications.filter((a: { type: string }) => a.type === 'private').map((a: { id: string }) => a.id);
  t.ok(privateIds.length > 5, 'more private applications than a page of 5');
  t.same(await seen(await client.applications.list({ type: 'private', size: 5 })), privateIds, 'the type filter the SDK sends, over pages');
  t.same(await seen(await client.reactors.list({ name: 'reactor 1' })), Array.from({ length: 10 }, (_, i) => `reactor-1${i}`), 'the name filter');
  t.same(await seen(await client.proxies.list({ id: ['proxy-03', 'proxy-20'] })), ['proxy-03', 'proxy-20'], 'the id filter, repeated');
  const firstPage = await client.reactors.list({ page: 2, size: 10 });
  t.same(firstPage.data.map((r) => r.id), Array.from({ length: 10 }, (_, i) => `reactor-${pad(i + 10)}`), 'a given page');
});

t.test('get, getByKey, tenants.self.get, permissions.list', async (t) => {
  const { client } = sdkClient(s.url, MGMT_KEY);
  const app = await client.applications.get(APP_PRIVATE);
  t.equal(app.id, APP_PRIVATE);
  t.equal(app.tenantId, TENANT_A, 'snake_case fields, camelCased by the SDK');
  t.equal(app.rules?.[0]?.transform, 'reveal');
  t.notOk(app.key ?? app.keys, 'no key');

  const own = await sdkClient(s.url, KEYS.private).client.applications.getByKey();
  t.equal(own.id, APP_PRIVATE, 'getByKey: the calling (private) key\'s application');
  t.equal((await client.applications.getByKey()).id, APP_MGMT);

  const proxy = await client.proxies.get('proxy-00');
  t.equal(proxy.destinationUrl, 'https://p00.example/api');
  t.same(proxy.requestTransforms, [{ type: 'tokenize', options: { identifier: 'n' } }], 'transforms are objects');
  t.same(proxy.responseTransforms, [{ type: 'mask', matcher: 'regex', expression: '(\\d+)', replacement: 'X' }]);
  t.notOk(proxy.key, 'no proxy key');

  const reactor = await client.reactors.get('reactor-07');
  t.equal(reactor.name, 'reactor 07');
  t.same(reactor.configuration, { NAME: '[redacted]' }, 'configuration names only');
  t.equal(reactor.runtime?.warmConcurrency, 1);

  const tenant = await client.tenants.self.get();
  t.same({ id: tenant.id, name: tenant.name }, { id: TENANT_A, name: 'tenant-a' });

  const all = await client.permissions.list();
  t.ok(all.some((p) => p.type === 'reactor:read' && p.applicationTypes?.includes('management')), 'permissions.list');
  const pub = await client.permissions.list({ applicationType: 'public' });
  t.same(pub.map((p) => p.type), ['token:create', 'token:update'], 'with the application type');

  const missing = await client.reactors.get('nope').then(() => null, (e: unknown) => e);
  t.ok(missing instanceof BasisTheoryError && missing.statusCode === 404, 'an unknown id: the SDK\'s 404');
});

t.test('the SDK\'s writes answer 405 managed_by_config', async (t) => {
  const { client } = sdkClient(s.url, MGMT_KEY);
  const calls: Array<[string, () => Promise<unknown>]> = [
    ['applications.create', () => client.applications.create({ name: 'x', type: 'private' })],
    ['applications.update', () => client.applications.update(APP_PRIVATE, { name: 'x' })],
    ['applications.delete', () => client.applications.delete(APP_PRIVATE)],
    ['proxies.create', () => client.proxies.create({ name: 'x', destinationUrl: 'https://x.example' })],
    ['proxies.update', () => client.proxies.update('proxy-00', { name: 'x', destinationUrl: 'https://x.example' })],
    ['proxies.patch', () => client.proxies.patch('proxy-00', { name: 'x' })],
    ['proxies.delete', () => client.proxies.delete('proxy-00')],
    ['reactors.create', () => client.reactors.create({ name: 'x', code: 'x' })],
    ['reactors.update', () => client.reactors.update('reactor-00', { name: 'x', code: 'x' })],
    ['reactors.patch', () => client.reactors.patch('reactor-00', { name: 'x' })],
    ['reactors.delete', () => client.reactors.delete('reactor-00')],
  ];
  for (const [name, run] of calls) {
    const err = await run().then(() => null, (e: unknown) => e);
    t.ok(err instanceof BasisTheoryError, `${name}: the SDK throws its error`);
    t.equal((err as BasisTheoryError).statusCode, 405, `${name}: 405`);
    t.equal(((err as BasisTheoryError).body as { code?: string }).code, 'managed_by_config');
  }
  const react = await sdkClient(s.url, KEYS.private).client.reactors.react('reactor-00', { args: { a: 1 } });
  t.same(react.raw, { a: 1 }, 'reactors.react (POST /reactors/{id}/react, a private key with reactor:invoke) still runs');
});

t.test('raw answers pass the SDK\'s own response schemas, unknown keys refused', async (t) => {
  const raw = async (path: string, key = MGMT_KEY) => {
    const res = await fetch(s.url + path, { headers: { 'svc-api-key': key } });
    t.equal(res.status, 200, path);
    return res.json() as Promise<unknown>;
  };
  strict(t, serialization.ApplicationPaginatedList, await raw('/applications'), 'GET /applications');
  strict(t, serialization.ApplicationPaginatedList, await raw('/applications?page=99'), 'GET /applications, past the last page');
  strict(t, serialization.Application, await raw(`/applications/${APP_PRIVATE}`), 'GET /applications/{id}');
  strict(t, serialization.Application, await raw('/applications/key', KEYS.public), 'GET /applications/key');
  strict(t, serialization.ProxyPaginatedList, await raw('/proxies?size=100'), 'GET /proxies');
  strict(t, serialization.Proxy, await raw('/proxies/proxy-00'), 'GET /proxies/{id}');
  strict(t, serialization.ReactorPaginatedList, await raw('/reactors?size=100'), 'GET /reactors');
  strict(t, serialization.Reactor, await raw('/reactors/reactor-00'), 'GET /reactors/{id}');
  strict(t, serialization.Tenant, await raw('/tenants/self'), 'GET /tenants/self');
  strict(t, serialization.permissions.list.Response, await raw('/permissions'), 'GET /permissions');
  strict(t, serialization.permissions.list.Response, await raw('/permissions?application_type=management'), 'GET /permissions?application_type');
  // The check can fail: a field the SDK does not know is refused.
  const r = serialization.Tenant.parse({ id: TENANT_A, name: 'x', legacy: true }, { unrecognizedObjectKeys: 'fail' });
  t.notOk(r.ok, 'the strict check refuses an unknown field');
});
