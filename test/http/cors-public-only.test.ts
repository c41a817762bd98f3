/**
 * Only answers to a public key carry CORS headers (src/http/cors.ts): Access-Control-Allow-Origin
 * is sent when the request's key is a valid public key whose application lists the origin, its
 * failures included (403, 429), and on no answer to a private or management key, a missing or an
 * invalid key. Otherwise a page could call with guessed keys and read which ones the service knows
 * (a 403 says "known key, wrong permission", a 401 says "unknown").
 */
import { request as httpRequest } from 'node:http';
import t from 'tap';
import { KEYS, baseConfig, startTestService } from '../helpers/service.js';

const SHOP = 'https://shop.example';
const OTHER_TENANT_SHOP = 'https://b-shop.example';
const MGMT = 'test_management_key_gggggggggggggg';
const PUBLIC_B = 'test_public_key_tenant_b_hhhhhhhhhh';

function config(rateLimited = false): Record<string, unknown> {
  const cfg = baseConfig() as { tenants: Array<{ applications: Array<Record<string, unknown>> }>; rate_limits: unknown };
  const a = cfg.tenants[0]!.applications;
  a.find((app) => app.type === 'public')!.allowed_origins = [SHOP];
  a.push({ id: 'aaaaaaaa-0000-4000-8000-0000000000c1', name: 'ops', type: 'management', keys: [MGMT] });
  cfg.tenants[1]!.applications.push({
    id: 'bbbbbbbb-0000-4000-8000-0000000000c2', name: 'b-public', type: 'public', keys: [PUBLIC_B],
    permissions: ['token:create'], allowed_origins: [OTHER_TENANT_SHOP],
  });
  if (rateLimited) cfg.rate_limits = { enabled: true, store: 'memory' };
  return cfg;
}

interface Answer {
  status: number;
  acao: string | undefined;
  vary: string | undefined;
  credentials: string | undefined;
  code: string | undefined;
  text: string;
}

/** node:http, so no client adds or drops an Origin of its own. */
function send(base: string, method: string, path: string, headers: Record<string, string>, body?: unknown): Promise<Answer> {
  const u = new URL(base);
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: u.hostname, port: u.port, method, path, agent: false,
      headers: payload === undefined ? headers : { 'content-type': 'application/json', ...headers },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => {
        let code: string | undefined;
        try {
          code = (JSON.parse(text) as { code?: string }).code;
        } catch {
          code = undefined;
        }
        const h = res.headers;
        resolve({
          status: res.statusCode ?? 0, text, code,
          acao: h['access-control-allow-origin'] as string | undefined,
          vary: h.vary, credentials: h['access-control-allow-credentials'] as string | undefined,
        });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

t.test('no CORS header on answers to a private, management, missing or invalid key', async (t) => {
  const s = await startTestService(t, { config: config() });
  const at = (headers: Record<string, string>, method = 'POST', path = '/tokenize') =>
    send(s.url, method, path, { origin: SHOP, ...headers }, method === 'POST' ? { a: 'x' } : undefined);

  const cases: Array<[string, Promise<Answer>, number, string | undefined]> = [
    ['a private key without token:create', at({ 'svc-api-key': KEYS.noPerm }), 403, 'forbidden'],
    ['a private key of the wrong kind for the route', at({ 'svc-api-key': KEYS.noPerm }, 'GET', '/tokens'), 403, 'forbidden'],
    ['an invalid key', at({ 'svc-api-key': 'not_a_key_of_this_service_000000' }), 401, 'invalid_api_key'],
    ['no key', at({}), 401, 'missing_api_key'],
    ['a management key on a token route', at({ 'svc-api-key': MGMT }), 403, 'forbidden'],
    ['a management key on its own route', at({ 'svc-api-key': MGMT }, 'GET', '/applications/key'), 200, undefined],
    ['a private key that may', at({ 'svc-api-key': KEYS.private }), 200, undefined],
    ["another tenant's private key", at({ 'svc-api-key': KEYS.tenantB }), 200, undefined],
  ];
  for (const [why, pending, status, code] of cases) {
    const r = await pending;
    t.equal(r.status, status, `${why}: ${status} (${r.text.slice(0, 160)})`);
    if (code) t.equal(r.code, code, `${why}: ${code}`);
    t.equal(r.acao, undefined, `${why}: no Access-Control-Allow-Origin`);
    t.equal(r.credentials, undefined, `${why}: no credentials`);
    t.match(r.vary ?? '', /Origin/, `${why}: Vary: Origin (the answer depends on it)`);
  }
});

t.test('a valid public key from a listed origin reads its answers, failures included', async (t) => {
  const s = await startTestService(t, { config: config() });
  const pub = { origin: SHOP, 'svc-api-key': KEYS.public };
  const ok = await send(s.url, 'POST', '/tokenize', pub, { a: 'x' });
  t.equal(ok.status, 200, ok.text);
  t.equal(ok.acao, SHOP, '200: the origin echoed');
  t.match(ok.vary ?? '', /Origin/);
  t.equal(ok.credentials, undefined, 'never with credentials');

  const list = await send(s.url, 'GET', '/tokens', pub);
  t.equal(list.status, 403, 'a public key cannot list tokens');
  t.equal(list.code, 'forbidden');
  t.equal(list.acao, SHOP, "its 403 is readable by its own page (a public key's validity is no secret of the page's)");
  t.notOk(list.text.includes('"data"'), 'no token page');

  const invalid = await send(s.url, 'POST', '/tokens', pub, { type: 'card', data: { number: '1' } });
  t.equal(invalid.status, 400);
  t.equal(invalid.acao, SHOP, '400: readable');

  // Refused origins: none of them gets the header, whatever the key.
  for (const [why, origin, key] of [
    ["another tenant's listed origin", OTHER_TENANT_SHOP, KEYS.public],
    ["a tenant's own public key from the other tenant's origin", SHOP, PUBLIC_B],
    ['a suffix-extended origin', `${SHOP}.evil.example`, KEYS.public],
    ['a prefix-extended origin', 'https://evilshop.example', KEYS.public],
    ['the null origin', 'null', KEYS.public],
  ] as const) {
    const r = await send(s.url, 'POST', '/tokenize', { origin, 'svc-api-key': key }, { a: 'x' });
    t.equal(r.status, 403, `${why}: 403`);
    t.equal(r.code, 'origin_not_allowed', `${why}: origin_not_allowed`);
    t.equal(r.acao, undefined, `${why}: no Access-Control-Allow-Origin`);
  }
  const b = await send(s.url, 'POST', '/tokenize', { origin: OTHER_TENANT_SHOP, 'svc-api-key': PUBLIC_B }, { a: 'x' });
  t.equal(b.acao, OTHER_TENANT_SHOP, "tenant B's public key from its own origin: readable");
});

t.test("a public key's 429 is readable; a private key's is not", async (t) => {
  const s = await startTestService(t, { config: config(true) });
  async function limited(headers: Record<string, string>): Promise<Answer | undefined> {
    for (let i = 0; i < 2000; i++) {
      const r = await send(s.url, 'POST', '/tokenize', headers, { a: 'x' });
      if (r.status === 429) return r;
      if (r.status !== 200) return r;
    }
    return undefined;
  }
  const pub = await limited({ origin: SHOP, 'svc-api-key': KEYS.public });
  t.equal(pub?.status, 429, 'the public key reaches its limit');
  t.equal(pub?.acao, SHOP, 'its 429 carries the origin');
  const noPerm = await send(s.url, 'POST', '/tokenize', { origin: SHOP, 'svc-api-key': KEYS.noPerm }, { a: 'x' });
  t.equal(noPerm.status, 403, 'a private key without the permission: 403 before any count');
  t.equal(noPerm.acao, undefined, 'without the header');
});

t.test('a preflight carries no key and answers as before', async (t) => {
  const s = await startTestService(t, { config: config() });
  const pre = await send(s.url, 'OPTIONS', '/tokenize', { origin: SHOP, 'access-control-request-method': 'POST' });
  t.equal(pre.status, 204);
  t.equal(pre.acao, SHOP);
  const refused = await send(s.url, 'OPTIONS', '/tokenize', { origin: 'https://evil.example', 'access-control-request-method': 'POST' });
  t.equal(refused.status, 403);
  t.equal(refused.acao, undefined);
});
