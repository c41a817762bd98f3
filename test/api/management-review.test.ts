/**
 * Review of the management reads (issue 28): what the first tests (management.test.ts) did not
 * try. A destination URL's fragment, never sent to the destination, may carry a secret (an
 * OAuth-style `#access_token=`) and is shown by no answer; the path and its `;` parameters are
 * the destination's address and are shown (docs/api.md "Management reads" says so). The
 * refused writes (405 managed_by_config) are no method a path allows: another method's 405 and a
 * browser's preflight name only what is served.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { baseConfig, startTestService } from '../helpers/service.js';

const secret = (name: string) => `${name}${randomBytes(6).toString('hex')}`;
const MGMT = secret('mgmt_review_key_0123456789_');
const FRAGMENT_SECRET = secret('fragsecret');
const ENCODED_FRAGMENT_SECRET = secret('encfragsecret');
const SHOP = 'https://shop.example';
const MGMT_B = secret('mgmt_review_key_b_0123456789_');
const MGMT_B_LOGS = secret('mgmt_review_key_b_logs_0123456789_');

function config(): Record<string, unknown> {
  const cfg = baseConfig() as any;
  cfg.tenants[0].applications.push({ id: 'aaaaaaaa-0000-4000-8000-0000000000b1', name: 'ops', type: 'management', keys: [MGMT] });
  cfg.tenants[0].applications[1].allowed_origins = [SHOP];
  cfg.tenants[0].proxies = [
    { id: 'hook', name: 'hook', key: secret('proxy_key_hook_0123456789'), destination_url: `https://hooks.example/in#access_token=${FRAGMENT_SECRET}` },
    { id: 'enc', name: 'enc', key: secret('proxy_key_enc_0123456789'),
      destination_url: `https://u%40x:p%23w@hooks.example/a;v=1/b?k=1#%61ccess=${ENCODED_FRAGMENT_SECRET}` },
  ];
  // Tenant B reuses the ids: proxy and reactor ids are the operator's words, not UUIDs.
  cfg.tenants[1].applications.push({ id: 'bbbbbbbb-0000-4000-8000-0000000000b1', name: 'ops-b', type: 'management', keys: [MGMT_B] });
  // As configs were written before the reads existed: a management application for the audit trail.
  cfg.tenants[1].applications.push({ id: 'bbbbbbbb-0000-4000-8000-0000000000b2', name: 'audit', type: 'management', keys: [MGMT_B_LOGS], permissions: ['log:read'] });
  cfg.tenants[1].proxies = [{ id: 'hook', name: 'hook of b', key: secret('proxy_key_b_hook_0123456789'), destination_url: 'https://tenant-b.example/in' }];
  cfg.tenants[1].reactors = [{ id: 'only-b', name: 'only-b', code: 'module.exports = async () => ({ raw: 1 });' }];
  return cfg;
}

const s = await startTestService(t, { config: config() });

t.test('a destination fragment is never shown, in a list or by id', async (t) => {
  const list = await s.call('GET', '/proxies', { key: MGMT });
  t.equal(list.status, 200);
  t.same(list.body.data.map((p: { destination_url: string }) => p.destination_url), ['https://hooks.example/in', 'https://hooks.example/a;v=1/b'],
    'no credentials, query or fragment; the path as written');
  for (const id of ['hook', 'enc']) {
    const one = await s.call('GET', `/proxies/${id}`, { key: MGMT });
    t.equal(one.status, 200, id);
    t.notMatch(one.text, /#|access/, `${id}: no fragment`);
  }
  for (const text of [list.text]) {
    t.notOk(text.includes(FRAGMENT_SECRET), 'the fragment secret is not in the list');
    t.notOk(text.includes(ENCODED_FRAGMENT_SECRET), 'nor the percent-encoded one');
  }
});

t.test('a refused write is no allowed method: Allow and preflights name only GET', async (t) => {
  for (const path of ['/applications', '/applications/key', '/proxies', '/proxies/hook', '/reactors', '/reactors/x']) {
    const r = await s.call('OPTIONS', path, { key: MGMT });
    t.equal(r.status, 405, `OPTIONS ${path}`);
    t.equal(r.body.code, 'method_not_allowed');
    t.equal(r.headers.get('allow'), 'GET', `OPTIONS ${path}: Allow names only GET, as the 405 managed_by_config does`);
    const w = await s.call('DELETE', path, { key: MGMT });
    t.equal(w.headers.get('allow'), 'GET', `DELETE ${path}: the same Allow`);
  }
  const preflight = (path: string, method: string) => s.call('OPTIONS', path, { key: null, headers: { origin: SHOP, 'access-control-request-method': method } });
  const ok = await preflight('/applications/key', 'GET');
  t.equal(ok.status, 204, 'a public application listing the origin may read its own application');
  t.equal(ok.headers.get('access-control-allow-methods'), 'GET, HEAD', 'the preflight names only the served methods');
  for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
    const r = await preflight('/applications/key', method);
    t.equal(r.status, 403, `a preflight for ${method} is refused: nothing is served there`);
    t.equal(r.body.code, 'origin_not_allowed');
  }
  const list = await preflight('/proxies', 'POST');
  t.equal(list.status, 403, 'no write on /proxies passes a preflight');
});

t.test('an unknown application type is a 400, as on /permissions, never an empty page', async (t) => {
  for (const q of ['type=managment', 'type=private&type=root']) {
    const r = await s.call('GET', `/applications?${q}`, { key: MGMT });
    t.equal(r.status, 400, q);
    t.equal(r.body.code, 'validation_failed');
    t.ok(r.body.errors.type, 'names the type parameter');
    t.notMatch(r.text, /managment|root/, 'without echoing the value');
  }
  const ok = await s.call('GET', '/applications?type=public&type=management', { key: MGMT });
  t.equal(ok.status, 200);
  t.same(ok.body.data.map((a: { type: string }) => a.type), ['public', 'management'], 'known types still filter');
});

t.test('ids shared by two tenants: each management key reads its own; another tenant\'s id is a 404', async (t) => {
  const a = await s.call('GET', '/proxies/hook', { key: MGMT });
  const b = await s.call('GET', '/proxies/hook', { key: MGMT_B });
  t.equal(a.body.destination_url, 'https://hooks.example/in', "tenant A's hook");
  t.equal(b.body.destination_url, 'https://tenant-b.example/in', "tenant B's hook");
  t.same((await s.call('GET', '/proxies?id=hook', { key: MGMT_B })).body.data.map((p: { name: string }) => p.name), ['hook of b']);
  const other = await s.call('GET', '/reactors/only-b', { key: MGMT });
  t.equal(other.status, 404, "tenant B's reactor id, asked by tenant A");
  const none = await s.call('GET', '/reactors/never-configured', { key: MGMT });
  t.same(other.body, none.body, 'the same answer as an id no tenant has (no probing)');
  t.same((await s.call('GET', '/reactors?id=only-b', { key: MGMT })).body.pagination.total_items, 0, 'nor through the id filter');
});

t.test('an id or query value holding a key is never echoed by an error', async (t) => {
  for (const path of [`/applications/${MGMT}`, `/proxies/${MGMT}`, `/reactors/${MGMT}`]) {
    const r = await s.call('GET', path, { key: MGMT });
    t.equal(r.status, 404, path.slice(0, 14));
    t.notOk(r.text.includes(MGMT), 'the 404 does not echo the id');
  }
  for (const q of [`page=${MGMT}`, `size=${MGMT}`, `type=${MGMT}`]) {
    const r = await s.call('GET', `/applications?${q}`, { key: MGMT });
    t.equal(r.status, 400, q.slice(0, 5));
    t.notOk(r.text.includes(MGMT), 'the 400 does not echo the value');
  }
  const perm = await s.call('GET', `/permissions?application_type=${MGMT}`, { key: MGMT });
  t.equal(perm.status, 400);
  t.notOk(perm.text.includes(MGMT), '/permissions does not echo the value');
});

t.test('a management application written before the reads (log:read only) keeps them all', async (t) => {
  for (const path of ['/applications', '/proxies', '/proxies/hook', '/reactors', '/reactors/only-b', '/tenants/self', '/permissions']) {
    t.equal((await s.call('GET', path, { key: MGMT_B_LOGS })).status, 200, path);
  }
  const own = await s.call('GET', '/applications/key', { key: MGMT_B_LOGS });
  t.same(own.body.permissions, ['log:read', 'application:read', 'proxy:read', 'reactor:read', 'tenant:read', 'permission:read'], 'shown with the reads it holds');
});
