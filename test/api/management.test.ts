/**
 * The management reads over plain HTTP (issue 28): permissions (401 without a key, 403 without
 * the kind or the permission), the implicit reads of a management application that lists none,
 * 404 for an unknown id, page-based paging and its edges, the filters, the 405 managed_by_config of
 * every write, and no key, digest, URL credential, configuration value or host path in any answer.
 * Every answer is also checked against the service's OpenAPI document.
 */
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readConfig } from '../../src/config/load.js';
import { MANAGEMENT_READ_PERMISSIONS } from '../../src/config/schema.js';
import { checkResponses } from '../helpers/openapi.js';
import { APP_PRIVATE, APP_PUBLIC, baseConfig, KEYS, startTestService, TENANT_A } from '../helpers/service.js';

const secret = (name: string) => `${name}-${randomBytes(6).toString('hex')}`;
const MGMT_ALL = secret('mgmt_all_key_0123456789');
const MGMT_APPS = secret('mgmt_apps_key_0123456789');
const MGMT_HASHED = secret('mgmt_hashed_key_0123456789');
const PROXY_KEYS = [secret('proxy_key_one_0123456789'), secret('proxy_key_two_0123456789'), secret('proxy_key_three_012345678')];
const URL_PASSWORD = secret('urlpass');
const URL_QUERY_SECRET = secret('querysecret');
const CONF_SECRET = secret('reactor-conf');
const CODE_SECRET = secret('code');
const APPEND_SECRET = secret('append');
const APP_MGMT_ALL = 'aaaaaaaa-0000-4000-8000-0000000000a1';
const APP_MGMT_APPS = 'aaaaaaaa-0000-4000-8000-0000000000a2';
const APP_MGMT_HASHED = 'aaaaaaaa-0000-4000-8000-0000000000a3';

const dir = mkdtempSync(join(tmpdir(), 'tp-mgmt-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const codeFile = join(dir, 'secret-transform-file.js');
writeFileSync(codeFile, `module.exports = async (req) => ({ body: req.args.body, headers: { x: '${CODE_SECRET}' } });`);
const reactorFile = join(dir, 'secret-reactor-file.js');
writeFileSync(reactorFile, `module.exports = async (req) => ({ raw: { got: req.args, s: '${CODE_SECRET}' } });`);

function config(): Record<string, unknown> {
  const cfg = baseConfig() as any;
  const a = cfg.tenants[0];
  a.applications.push(
    { id: APP_MGMT_ALL, name: 'ops', type: 'management', keys: [MGMT_ALL] },
    { id: APP_MGMT_APPS, name: 'apps-only', type: 'management', keys: [MGMT_APPS], permissions: ['application:read', 'log:read'] },
    { id: APP_MGMT_HASHED, name: 'hashed', type: 'management', keys: [{ sha256: createHash('sha256').update(MGMT_HASHED).digest('hex') }] },
  );
  a.proxies = [
    { id: 'billing', name: 'Billing', key: PROXY_KEYS[0], destination_url: `https://svc-user:${URL_PASSWORD}@upstream.example/api?api_key=${URL_QUERY_SECRET}`,
      request_transforms: [{ type: 'code', code_file: codeFile }],
      response_transforms: [{ type: 'mask', pattern: '(\\d{4})' }, { type: 'append_header', name: 'x-extra', value: APPEND_SECRET }, { type: 'append_json', location: '/extra', value: APPEND_SECRET }] },
    { id: 'cards', name: 'Cards in', key: PROXY_KEYS[1], destination_url: 'https://cards.example/in',
      request_transforms: [{ type: 'tokenize', identifier: 'card', fields: [{ pointer: '/number', token: { type: 'card_number' } }] }] },
    { id: 'plain', name: 'plain', key: PROXY_KEYS[2], destination_url: 'https://plain.example/' },
  ];
  a.reactors = [
    { id: 'charge', name: 'Charge', configuration: { PASSWORD: CONF_SECRET, REGION: 'eu' }, code: `module.exports = async (req) => ({ raw: req.args });` },
    { id: 'filed', name: 'From a file', code_file: reactorFile, timeout_ms: 2500 },
    { id: 'third', name: 'third', code: 'module.exports = async () => ({ raw: 1 });' },
  ];
  return cfg;
}

const s = await startTestService(t, { config: config() });
await checkResponses(s);
const SECRETS = [
  ...Object.values(KEYS), MGMT_ALL, MGMT_APPS, MGMT_HASHED, ...PROXY_KEYS,
  ...[...Object.values(KEYS), MGMT_ALL, MGMT_APPS, MGMT_HASHED, ...PROXY_KEYS].map((k) => createHash('sha256').update(k).digest('hex')),
  URL_PASSWORD, URL_QUERY_SECRET, CONF_SECRET, CODE_SECRET, APPEND_SECRET, dir, codeFile, reactorFile, s.dataDir, 'svc-user',
];
const answers: string[] = [];
const get = async (path: string, key: string | null = MGMT_ALL) => {
  const r = await s.call('GET', path, { key });
  answers.push(r.text);
  return r;
};

t.test('401 without a key, 403 without the kind or the permission', async (t) => {
  const reads = ['/applications', `/applications/${APP_PRIVATE}`, '/proxies', '/proxies/billing', '/reactors', '/reactors/charge', '/tenants/self', '/permissions'];
  for (const p of [...reads, '/applications/key']) {
    const r = await get(p, null);
    t.equal(r.status, 401, `${p}: no key`);
    t.equal(r.body.code, 'missing_api_key');
  }
  for (const p of reads) {
    const r = await get(p, KEYS.private);
    t.equal(r.status, 403, `${p}: a private key`);
    t.equal(r.body.code, 'forbidden');
  }
  for (const [p, perm] of [['/proxies', 'proxy:read'], ['/proxies/billing', 'proxy:read'], ['/reactors', 'reactor:read'], ['/reactors/charge', 'reactor:read'], ['/tenants/self', 'tenant:read'], ['/permissions', 'permission:read']]) {
    const r = await get(p!, MGMT_APPS);
    t.equal(r.status, 403, `${p}: a management key without ${perm}`);
    t.equal(r.body.code, 'forbidden');
    t.equal(r.body.detail, `The key lacks the permission ${perm}`);
  }
  t.equal((await get('/applications', MGMT_APPS)).status, 200, 'a management key with application:read reads the applications');
  t.equal((await get(`/applications/${APP_PUBLIC}`, MGMT_APPS)).status, 200);
});

t.test('a management application that lists no management read holds them all; listing one opts out', async (t) => {
  const apps = (await get('/applications?size=100')).body.data as Array<{ id: string; permissions: string[] }>;
  const all = apps.find((a) => a.id === APP_MGMT_ALL)!;
  t.same(all.permissions, MANAGEMENT_READ_PERMISSIONS, 'shown with the reads it holds');
  t.same(apps.find((a) => a.id === APP_MGMT_APPS)!.permissions, ['application:read', 'log:read'], 'only what it lists');
  t.same(apps.find((a) => a.id === APP_PRIVATE)!.permissions, (baseConfig() as any).tenants[0].applications[0].permissions, 'other kinds get nothing added');
  for (const p of ['/applications', '/proxies', '/reactors', '/tenants/self', '/permissions']) t.equal((await get(p, MGMT_HASHED)).status, 200, `${p}: a key held as a digest`);
});

t.test('the config check: only management applications may hold the management reads', async (t) => {
  for (const perm of MANAGEMENT_READ_PERMISSIONS) {
    const cfg = baseConfig() as any;
    cfg.tenants[0].applications[0].permissions = [...cfg.tenants[0].applications[0].permissions, perm];
    const { problems } = readConfig(cfg, { env: { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') } });
    t.match(problems.join('\n'), `only a management application may hold "${perm}" (this one is private)`, perm);
  }
});

t.test('answers: shapes, one by id, the key\'s own application, the tenant', async (t) => {
  const one = await get(`/applications/${APP_MGMT_APPS.toUpperCase()}`);
  t.equal(one.status, 200, 'application ids match case-insensitively (they are UUIDs)');
  t.same(one.body, { id: APP_MGMT_APPS, tenant_id: TENANT_A, name: 'apps-only', type: 'management', permissions: ['application:read', 'log:read'], rules: [] });
  const priv = await get(`/applications/${APP_PRIVATE}`);
  t.same(priv.body.rules, [{ priority: 1, container: '/', transform: 'reveal', permissions: ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search'] }]);

  for (const [key, id] of [[KEYS.private, APP_PRIVATE], [KEYS.public, APP_PUBLIC], [MGMT_APPS, APP_MGMT_APPS]]) {
    const r = await get('/applications/key', key!);
    t.equal(r.status, 200, `/applications/key with the ${id} key`);
    t.equal(r.body.id, id, 'its own application');
  }

  const billing = await get('/proxies/billing');
  t.same(billing.body, {
    id: 'billing', tenant_id: TENANT_A, name: 'Billing', destination_url: 'https://upstream.example/api', require_auth: true,
    request_transforms: [{ type: 'code' }],
    response_transforms: [
      { type: 'mask', matcher: 'regex', expression: '(\\d{4})', replacement: 'X' },
      { type: 'append_header', options: { location: 'x-extra' } },
      { type: 'append_json', options: { location: '/extra' } },
    ],
  }, 'transforms are objects; no credentials, query, code, file or appended value');
  t.same((await get('/proxies/cards')).body.request_transforms, [{ type: 'tokenize', options: { identifier: 'card' } }]);

  t.same((await get('/reactors/charge')).body, {
    id: 'charge', tenant_id: TENANT_A, name: 'Charge', configuration: { PASSWORD: '[redacted]', REGION: '[redacted]' }, runtime: { timeout: 30, warm_concurrency: 1 },
  }, 'configuration names only; no code');
  t.same((await get('/reactors/filed')).body.runtime.timeout, 2.5, 'the timeout in seconds');

  t.same((await get('/tenants/self')).body, { id: TENANT_A, name: 'tenant-a' });
});

t.test('404 for an unknown id, and for another tenant\'s', async (t) => {
  for (const p of ['/applications/aaaaaaaa-0000-4000-8000-00000000ffff', '/applications/bbbbbbbb-0000-4000-8000-000000000001', '/proxies/nope', '/reactors/nope']) {
    const r = await get(p);
    t.equal(r.status, 404, p);
    t.equal(r.body.code, 'not_found');
  }
});

t.test('page-based paging and its edges', async (t) => {
  const page = async (q: string) => (await get(`/proxies${q}`)).body;
  t.same((await page('')).pagination, { total_items: 3, page_number: 1, page_size: 20, total_pages: 1 }, 'defaults: page 1, size 20');
  const p1 = await page('?page=1&size=2');
  t.same(p1.pagination, { total_items: 3, page_number: 1, page_size: 2, total_pages: 2 });
  t.same(p1.data.map((p: { id: string }) => p.id), ['billing', 'cards'], 'in config order');
  const p2 = await page('?page=2&size=2');
  t.same(p2.data.map((p: { id: string }) => p.id), ['plain']);
  const past = await page('?page=9&size=2');
  t.same(past, { pagination: { total_items: 3, page_number: 9, page_size: 2, total_pages: 2 }, data: [] }, 'a page past the last: empty, right totals');
  t.equal((await get('/reactors?page=1000000000&size=100')).body.data.length, 0, 'the largest page is empty');
  for (const [q, field] of [['size=0', 'size'], ['size=101', 'size'], ['size=x', 'size'], ['page=0', 'page'], ['page=-1', 'page'], ['page=1.5', 'page'], ['page=1000000001', 'page'], ['page=0x2', 'page'], ['page=1e0', 'page'], ['size=0x10', 'size'], ['size=1e1', 'size'], ['size=%202', 'size']]) {
    for (const path of ['/applications', '/proxies', '/reactors']) {
      const r = await get(`${path}?${q}`);
      t.equal(r.status, 400, `${path}?${q}`);
      t.equal(r.body.code, 'validation_failed');
      t.ok(r.body.errors[field!], `names ${field}`);
    }
  }
  t.equal((await get('/applications?size=101')).body.detail, 'size must be an integer from 1 to 100');
});

t.test('list filters', async (t) => {
  const ids = async (p: string) => ((await get(p)).body.data as Array<{ id: string }>).map((x) => x.id);
  t.same(await ids('/applications?type=management'), [APP_MGMT_ALL, APP_MGMT_APPS, APP_MGMT_HASHED]);
  t.same(await ids('/applications?type=public&type=management&size=1&page=2'), [APP_MGMT_ALL], 'types repeat; paging after filtering');
  t.same(await ids(`/applications?id=${APP_PUBLIC}&id=${APP_MGMT_ALL}`), [APP_PUBLIC, APP_MGMT_ALL]);
  t.same(await ids('/proxies?name=CARD'), ['cards'], 'name: contains, case-insensitive');
  t.same(await ids('/proxies?id=plain&id=billing'), ['billing', 'plain']);
  t.same(await ids('/reactors?name=i'), ['filed', 'third']);
  t.same(await ids('/reactors?id=nope'), []);
  t.same((await get('/reactors?id=nope')).body.pagination, { total_items: 0, page_number: 1, page_size: 20, total_pages: 0 });
});

t.test('GET /permissions, with and without application_type', async (t) => {
  const all = (await get('/permissions')).body as Array<{ type: string; description: string; application_types: string[] }>;
  t.ok(all.length >= 14, 'every permission');
  t.same(all.find((p) => p.type === 'token:create')!.application_types, ['private', 'public', 'management']);
  t.same(all.find((p) => p.type === 'token:use')!.application_types, ['private']);
  t.same(all.find((p) => p.type === 'reactor:read')!.application_types, ['management']);
  for (const p of all) t.ok(p.description.length > 0, `${p.type} is described`);
  const types = async (type: string) => ((await get(`/permissions?application_type=${type}`)).body as Array<{ type: string }>).map((p) => p.type);
  t.same(await types('public'), ['token:create', 'token:update']);
  const priv = await types('private');
  t.ok(priv.includes('token:use') && !priv.includes('log:read') && !priv.includes('proxy:read'), 'private: token:use, no management permission');
  const mgmt = await types('management');
  t.ok(mgmt.includes('log:read') && mgmt.includes('tenant:read') && !mgmt.includes('token:use'), 'management: the reads and log:read, not token:use');
  const bad = await get('/permissions?application_type=root');
  t.equal(bad.status, 400);
  t.equal(bad.body.code, 'validation_failed');
});

t.test('writes answer 405 managed_by_config with Allow: GET; the reactor call still works', async (t) => {
  for (const path of ['/applications', `/applications/${APP_PRIVATE}`, '/proxies', '/proxies/billing', '/reactors', '/reactors/charge', '/reactors/nope']) {
    for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
      const r = await s.call(method, path, { key: MGMT_ALL, body: { name: 'x' } });
      answers.push(r.text);
      t.equal(r.status, 405, `${method} ${path}`);
      t.equal(r.body.code, 'managed_by_config');
      t.equal(r.headers.get('allow'), 'GET');
      t.match(r.headers.get('content-type'), /^application\/problem\+json/);
      t.match(r.body.detail, /configuration file.*source of truth.*tokenproxy reload.*SIGHUP/);
    }
  }
  const noKey = await s.call('DELETE', '/proxies/billing', { key: null });
  t.equal(noKey.status, 401, 'a key is needed first');
  const react = await s.call('POST', '/reactors/charge/react', { body: { args: { a: 1 } } });
  t.equal(react.status, 200, 'POST /reactors/{id}/react is another path, still served');
  t.same(react.body.raw, { a: 1 });
  const head = await s.call('HEAD', '/proxies', { key: MGMT_ALL });
  t.equal(head.status, 200, 'HEAD, as every GET route');
});

t.test('no key, digest, URL credential, configuration value, code or host path in any answer', async (t) => {
  // Every read once more with each kind of key that may call it, then the scan.
  for (const p of ['/applications?size=100', '/proxies', '/reactors', '/tenants/self', '/permissions', '/applications/key']) await get(p);
  for (const id of ['billing', 'cards', 'plain']) await get(`/proxies/${id}`);
  for (const id of ['charge', 'filed', 'third']) await get(`/reactors/${id}`);
  await get('/applications/key', KEYS.public);
  const text = answers.join('\n');
  t.ok(answers.length > 100, `${answers.length} answers scanned`);
  t.ok(text.includes('upstream.example') && text.includes('PASSWORD'), 'the scan sees the answers (a destination host, a configuration name)');
  for (const secretValue of SECRETS) t.notOk(text.toLowerCase().includes(secretValue.toLowerCase()), `not in any answer: ${secretValue.slice(0, 8)}…`);
  t.notOk(text.includes(tmpdir()), 'no temporary path of the host');
});
