/**
 * The read-only management routes the management-key rule counts: `GET /applications`,
 * `GET /proxies`, `GET /reactors`. A management key gets its own tenant's resources with every key
 * and secret left out; other key kinds get 403, no key 401.
 */
import t from 'tap';
import { createHash } from 'node:crypto';
import { startTestService } from '../helpers/service.js';
import { client, expectAllowed, limitedConfig, newKey, tenant } from './http-helpers.js';

const PROXY_KEY = newKey();
const HASHED_KEY = newKey();
const SECRETS = ['conf-secret-0f3a9c', 'code-secret-7b21e4', 'reactor-conf-secret-55aa01', 'reactor-code-secret-c0ffee'];

const m = tenant({ apps: [{ kind: 'management' }, { kind: 'private', keys: 2 }, { kind: 'public' }] });
const mApps = m.config.applications as Array<Record<string, unknown>>;
// One key held only as its digest (the production form).
mApps[1].keys = [...(mApps[1].keys as string[]), { sha256: createHash('sha256').update(HASHED_KEY).digest('hex') }];
m.config.proxies = [
  {
    id: 'billing', name: 'billing', key: PROXY_KEY, destination_url: 'https://upstream.example/api',
    configuration: { API_TOKEN: SECRETS[0] },
    request_transforms: [{ type: 'code', code: `module.exports = async (req) => ({ body: req.args.body, headers: { x: '${SECRETS[1]}' } });` }],
  },
];
m.config.reactors = [
  { id: 'charge', name: 'charge', configuration: { PASSWORD: SECRETS[2] }, code: `module.exports = async () => ({ raw: '${SECRETS[3]}' });` },
];
const other = tenant({ apps: [{ kind: 'management' }, { kind: 'private' }] });
const leaky = tenant({ apps: [{ kind: 'management' }] });
leaky.config.proxies = [{ id: 'leaky', name: 'leaky', key: newKey(), destination_url: 'https://svc-user:url-password-9d8e@upstream.example/api?api_key=url-query-secret-41' }];

const s = await startTestService(t, { config: limitedConfig([m, other, leaky]) });
const allKeys = [...m.keys.flat(), ...other.keys.flat(), PROXY_KEY, HASHED_KEY];
const digests = allKeys.map((k) => createHash('sha256').update(k).digest('hex'));

t.test('a management key reads its tenant\'s resources with every key and secret left out', async (t) => {
  const c = client(t, s.url);
  const key = m.keys[0][0];

  const apps = await c.send('GET', '/applications', { key });
  expectAllowed(t, apps, 200, 200, 199, 'GET /applications:');
  t.same((apps.body as { data: Array<{ id: string }> }).data.map((a) => a.id), mApps.map((a) => a.id), 'this tenant\'s applications only');
  t.match(apps.body, { data: [{ type: 'management' }, { type: 'private', permissions: Array }, { type: 'public', permissions: ['token:create'] }] });
  for (const a of (apps.body as { data: Array<Record<string, unknown>> }).data) t.notOk('keys' in a, `application ${String(a.name)}: no keys`);

  const proxies = await c.send('GET', '/proxies', { key });
  expectAllowed(t, proxies, 200, 200, 198, 'GET /proxies:');
  // issue 28: a transform is an object as the original's clients read it, never its code
  t.match(proxies.body, { data: [{ id: 'billing', destination_url: 'https://upstream.example/api', request_transforms: [{ type: 'code' }] }] });
  t.notOk('code' in (proxies.body as { data: Array<{ request_transforms: object[] }> }).data[0]!.request_transforms[0]!, 'proxy transform: no code');
  for (const field of ['key', 'key_sha256', 'configuration']) t.notOk(field in (proxies.body as { data: object[] }).data[0], `proxy: no ${field}`);

  const reactors = await c.send('GET', '/reactors', { key });
  expectAllowed(t, reactors, 200, 200, 197, 'GET /reactors:');
  t.match(reactors.body, { data: [{ id: 'charge', name: 'charge' }] });
  for (const field of ['code', 'code_file']) t.notOk(field in (reactors.body as { data: object[] }).data[0], `reactor: no ${field}`);
  // issue 28: the configuration's names only, every value redacted (none is marked as not secret)
  t.same((reactors.body as { data: Array<{ configuration: unknown }> }).data[0]!.configuration, { PASSWORD: '[redacted]' }, 'reactor: configuration names, no values');

  const text = apps.text + proxies.text + reactors.text;
  for (const k of allKeys) t.notOk(text.includes(k), 'no API or proxy key in any answer');
  for (const d of digests) t.notOk(text.toLowerCase().includes(d), 'no key digest in any answer');
  for (const secret of SECRETS) t.notOk(text.includes(secret), `no configuration or code secret (${secret.split('-').slice(0, -1).join('-')})`);
  t.notOk(text.includes(other.id) || text.includes(String((other.config.applications as Array<{ id: string }>)[0].id)), 'nothing of another tenant');
});

t.test('other key kinds get 403, no key 401', async (t) => {
  const c = client(t, s.url);
  for (const path of ['/applications', '/proxies', '/reactors']) {
    for (const [kind, key] of [['private', m.keys[1][0]], ['public', m.keys[2][0]]] as const) {
      const r = await c.send('GET', path, { key });
      t.equal(r.status, 403, `${kind} key on ${path}`);
      t.match(r.body, { code: 'forbidden', status: 403 });
      t.match(r.headers['content-type'], /^application\/problem\+json/);
    }
    const none = await c.send('GET', path);
    t.equal(none.status, 401, `no key on ${path}`);
    t.equal(none.body?.code, 'missing_api_key');
  }
});

t.test('a destination URL carrying credentials is not shown with them', async (t) => {
  const r = await client(t, s.url).send('GET', '/proxies', { key: leaky.keys[0][0] });
  t.equal(r.status, 200);
  // issue 30: the proxy is shown, its URL without user, password and query (an answer leaving
  // the proxy out passed the checks below)
  t.same((r.body as { data: Array<{ id: string; destination_url: string }> }).data.map((p) => [p.id, p.destination_url]),
    [['leaky', 'https://upstream.example/api']], 'the proxy, with its destination minus the credentials');
  t.notOk(r.text.includes('url-password-9d8e'), 'no password from the URL');
  t.notOk(r.text.includes('url-query-secret-41'), 'no secret from the URL query');
});
