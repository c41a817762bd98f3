/**
 * CORS for public applications (issue 27, src/http/cors.ts), over HTTP against a real server:
 * preflights, the headers on real answers to a public key (errors and 429 included), a public key from an origin
 * its application does not list, other kinds of keys, and the config checks.
 */
import t from 'tap';
import { buildConfig, ConfigError } from '../../src/config/load.js';
import { compile } from '../../src/model/compile.js';
import { APP_PRIVATE, APP_PUBLIC, KEYS, baseConfig, startTestService } from '../helpers/service.js';

const SHOP = 'https://shop.example';
const OTHER_SHOP = 'https://other.example';
const EVIL = 'https://evil.example';
const OTHER_PUBLIC_KEY = 'test_public_key_other_ffffffffffff';

/** Tenant A's public app lists SHOP; a second public app (create only) lists OTHER_SHOP and *.sub.example. */
function corsConfig(rateLimited = false): Record<string, unknown> {
  const cfg = baseConfig() as { tenants: Array<{ applications: Array<Record<string, unknown>> }>; rate_limits: unknown };
  const apps = cfg.tenants[0]!.applications;
  const pub = apps.find((a) => a.id === APP_PUBLIC)!;
  pub.allowed_origins = [SHOP];
  apps.push({
    id: 'aaaaaaaa-0000-4000-8000-0000000000f1', name: 'other-public', type: 'public', keys: [OTHER_PUBLIC_KEY],
    permissions: ['token:create'], allowed_origins: [OTHER_SHOP, 'https://*.sub.example'],
  });
  if (rateLimited) cfg.rate_limits = { enabled: true, store: 'memory' };
  return cfg;
}

async function send(url: string, method: string, path: string, headers: Record<string, string>, body?: unknown) {
  const res = await fetch(url + path, { method, headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: text ? (JSON.parse(text) as Record<string, unknown>) : undefined };
}

t.test('preflights', async (t) => {
  const svc = await startTestService(t, { config: corsConfig() });
  const pre = (origin: string, path: string, method: string) =>
    send(svc.url, 'OPTIONS', path, { origin, 'access-control-request-method': method, 'access-control-request-headers': 'svc-api-key, content-type' });

  const ok = await pre(SHOP, '/tokenize', 'POST');
  t.equal(ok.status, 204, 'an allowed origin, a route its public key may call: 204');
  t.equal(ok.headers.get('access-control-allow-origin'), SHOP, 'the origin is echoed, never *');
  t.equal(ok.headers.get('access-control-allow-methods'), 'POST', 'only the route\'s methods');
  const allowHeaders = ok.headers.get('access-control-allow-headers')!.split(',').map((h) => h.trim());
  for (const h of ['svc-api-key', 'content-type', 'svc-idempotency-key']) t.ok(allowHeaders.includes(h), `allows the header ${h}`);
  t.equal(ok.headers.get('access-control-max-age'), '600');
  t.match(ok.headers.get('vary'), /Origin/);
  t.equal(ok.text, '', 'no body');

  const tokens = await pre(SHOP, '/tokens', 'POST');
  t.equal(tokens.status, 204, 'POST /tokens too');
  t.equal(tokens.headers.get('access-control-allow-methods'), 'POST', 'GET /tokens is not offered: no listing app has token:search');

  const wildcard = await pre('https://a.sub.example', '/tokenize', 'POST');
  t.equal(wildcard.headers.get('access-control-allow-origin'), 'https://a.sub.example', 'https://*.sub.example matches a subdomain');
  const bare = await pre('https://sub.example', '/tokenize', 'POST');
  t.equal(bare.status, 403, 'but not the domain itself');
  const http = await pre('http://a.sub.example', '/tokenize', 'POST');
  t.equal(http.status, 403, 'nor http');

  for (const [origin, path, method, why] of [
    [EVIL, '/tokenize', 'POST', 'an origin no application lists'],
    [SHOP, '/tokens', 'GET', 'a method no listing application may call (GET /tokens needs token:search)'],
    [SHOP, '/tokens/search', 'POST', 'a route no listing application may call'],
  ] as const) {
    const r = await pre(origin, path, method);
    t.equal(r.status, 403, `${why}: 403`);
    t.equal(r.json?.code, 'origin_not_allowed', `${why}: origin_not_allowed`);
    t.equal(r.headers.get('access-control-allow-origin'), null, `${why}: no Access-Control-Allow-Origin`);
  }
  const proxied = await pre(SHOP, '/proxy/anything', 'POST');
  t.equal(proxied.headers.get('access-control-allow-origin'), null, 'a proxy path\'s preflight is not answered by the CORS rules');
  t.same(proxied.json?.proxy_error && (proxied.json.proxy_error as { code: string }).code, 'missing_proxy_key', 'it reaches the proxy route as before (which wants its key)');
  const none = await pre(SHOP, '/nothing-here', 'POST');
  t.equal(none.status, 404, 'a path no route serves: 404');
  t.equal(none.json?.code, 'route_not_found');
});

t.test('real requests', async (t) => {
  const svc = await startTestService(t, { config: corsConfig() });
  const created = await send(svc.url, 'POST', '/tokenize', { origin: SHOP, 'svc-api-key': KEYS.public }, { a: 'hello' });
  t.equal(created.status, 200, created.text);
  t.equal(created.headers.get('access-control-allow-origin'), SHOP, 'the answer carries the origin');
  t.match(created.headers.get('vary'), /Origin/);
  t.match(created.headers.get('access-control-expose-headers'), /svc-trace-id/, 'the trace id can be read by the page');

  const badKey = await send(svc.url, 'POST', '/tokenize', { origin: SHOP, 'svc-api-key': 'not-a-key-at-all-xxxxxxxx' }, { a: 'x' });
  t.equal(badKey.status, 401);
  t.equal(badKey.headers.get('access-control-allow-origin'), null, 'a 401 is not readable by the page (it would tell known keys from unknown ones)');
  t.match(badKey.headers.get('vary'), /Origin/);

  const notListed = await send(svc.url, 'POST', '/tokenize', { origin: OTHER_SHOP, 'svc-api-key': KEYS.public }, { a: 'x' });
  t.equal(notListed.status, 403, "a public key from another application's origin: 403");
  t.equal(notListed.json?.code, 'origin_not_allowed');
  t.equal(notListed.headers.get('access-control-allow-origin'), null, 'without the header');

  const evil = await send(svc.url, 'POST', '/tokenize', { origin: EVIL, 'svc-api-key': KEYS.public }, { a: 'x' });
  t.equal(evil.status, 403, 'a public key from an unlisted origin: 403');
  t.equal(evil.headers.get('access-control-allow-origin'), null);

  const before = await svc.call('GET', '/tokens?size=100', { key: KEYS.private });
  const privateFromPage = await send(svc.url, 'POST', '/tokenize', { origin: SHOP, 'svc-api-key': KEYS.private }, { a: 'y' });
  t.equal(privateFromPage.status, 200, 'a private key with an Origin is served (a server may forward a browser\'s Origin)');
  t.equal(privateFromPage.headers.get('access-control-allow-origin'), null, 'but its answer is never readable by a page');
  const after = await svc.call('GET', '/tokens?size=100', { key: KEYS.private });
  t.equal(after.body.data.length, before.body.data.length + 1);

  const sameHost = new URL(svc.url);
  const own = await send(svc.url, 'POST', '/tokenize', { origin: `${sameHost.protocol}//${sameHost.host}`, 'svc-api-key': KEYS.public }, { a: 'z' });
  t.equal(own.status, 200, 'the service\'s own origin (its hosted fields) needs no list');
  t.equal(own.headers.get('access-control-allow-origin'), null, 'and gets no CORS headers');

  const noOrigin = await send(svc.url, 'POST', '/tokenize', { 'svc-api-key': KEYS.public }, { a: 'z' });
  t.equal(noOrigin.status, 200, 'a call without Origin (a server, curl) is served as before');
  t.equal(noOrigin.headers.get('access-control-allow-origin'), null);
});

t.test('rate limits: a 429 is readable, preflights are not counted', async (t) => {
  const svc = await startTestService(t, { config: corsConfig(true) });
  // The public tier counts per key and client IP; preflights carry no key and are not counted.
  for (let i = 0; i < 80; i++) {
    const r = await send(svc.url, 'OPTIONS', '/tokenize', { origin: SHOP, 'access-control-request-method': 'POST' });
    if (r.status !== 204) {
      t.fail(`preflight ${i} answered ${r.status}`);
      break;
    }
  }
  const first = await send(svc.url, 'POST', '/tokenize', { origin: SHOP, 'svc-api-key': KEYS.public }, { a: 'x' });
  t.equal(first.status, 200, 'after 80 preflights the key still has its whole budget');
  const limit = Number(first.headers.get('ratelimit-limit'));
  t.ok(limit > 0, `the key's limit is announced (${limit})`);
  let limited: Awaited<ReturnType<typeof send>> | undefined;
  for (let i = 0; i < limit + 5 && !limited; i++) {
    const r = await send(svc.url, 'POST', '/tokenize', { origin: SHOP, 'svc-api-key': KEYS.public }, { a: 'x' });
    if (r.status === 429) limited = r;
  }
  t.ok(limited, 'the key reaches its limit');
  t.equal(limited?.headers.get('access-control-allow-origin'), SHOP, 'the 429 is readable by the page');
  t.equal(limited?.json?.code, 'rate_limited');
});

t.test('config: origins only on public applications, and well-formed', async (t) => {
  const check = (mutate: (app: Record<string, unknown>) => void, which?: string) => {
    const cfg = corsConfig() as { tenants: Array<{ applications: Array<Record<string, unknown>> }> };
    mutate(cfg.tenants[0]!.applications.find((a) => a.id === (which ?? APP_PUBLIC))!);
    try {
      const loaded = buildConfig(cfg, { env: { TOKENPROXY_MASTER_KEY: Buffer.alloc(32, 1).toString('base64') } });
      const compiled = compile(loaded);
      return Array.isArray(compiled) ? compiled : [];
    } catch (err) {
      return err instanceof ConfigError ? err.problems : [String(err)];
    }
  };
  t.same(check(() => {}), [], 'the test config is valid');
  const priv = check((a) => void (a.allowed_origins = [SHOP]), APP_PRIVATE);
  t.match(priv.join('\n'), /tenants\[0\]\.applications\[0\]\.allowed_origins: only public applications may list origins \(a private key must never be in a web page\)/);
  for (const bad of ['https://shop.example/', 'https://shop.example/path', '*', 'https://*.com', 'http://*.shop.example', 'shop.example']) {
    const problems = check((a) => void (a.allowed_origins = [bad]));
    t.match(problems.join('\n'), /allowed_origins\[0\]: not an origin/, `refused: ${bad}`);
  }
  for (const good of ['https://shop.example', 'http://localhost:3000', 'https://*.shop.example', 'http://127.0.0.1:8080']) {
    t.same(check((a) => void (a.allowed_origins = [good])), [], `accepted: ${good}`);
  }
});

t.test('every route of /openapi.json: a preflight is allowed only where a listing public key may call', async (t) => {
  const svc = await startTestService(t, { config: corsConfig() });
  const doc = (await (await fetch(`${svc.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
  // The public applications of corsConfig hold token:create only; any key reads its own
  // application (issue 28). The refused writes (405 managed_by_config) are no callable method.
  const callable = new Set(['POST /tokenize', 'POST /tokens', 'GET /applications/key']);
  let checked = 0;
  for (const [template, ops] of Object.entries(doc.paths)) {
    const path = template.replace(/\{[^}]+\}/g, '0b3f5c1e-2a4d-4e6f-8a9b-1c2d3e4f5a6b');
    for (const method of Object.keys(ops).map((m) => m.toUpperCase())) {
      if (!['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].includes(method)) continue;
      const r = await send(svc.url, 'OPTIONS', path, { origin: SHOP, 'access-control-request-method': method });
      const allowed = r.headers.get('access-control-allow-origin') === SHOP;
      t.equal(allowed, callable.has(`${method} ${template}`), `${method} ${template}: ${r.status}`);
      if (allowed) t.equal(r.status, 204);
      checked++;
    }
  }
  t.ok(checked >= 20, `every operation of the document was asked for (${checked})`);
});

t.test("error classes on a public key's real request from a listed origin carry the header", async (t) => {
  const cfg = corsConfig() as { server: Record<string, unknown> };
  cfg.server = { ...cfg.server, body_limit_bytes: 4096 };
  const svc = await startTestService(t, { config: cfg });
  const h = { origin: SHOP, 'svc-api-key': KEYS.public };
  const cases: Array<[string, Promise<Awaited<ReturnType<typeof send>>>, number]> = [
    ['validation_failed', send(svc.url, 'POST', '/tokens', h, { type: 'card', data: { number: '1' } }), 400],
    ['invalid_json', fetch(`${svc.url}/tokenize`, { method: 'POST', headers: { ...h, 'content-type': 'application/json' }, body: '{' }).then(async (r) => ({ status: r.status, headers: r.headers, text: '', json: (await r.json()) as Record<string, unknown> })), 400],
    ['unsupported_media_type', fetch(`${svc.url}/tokenize`, { method: 'POST', headers: { ...h, 'content-type': 'text/plain' }, body: 'x' }).then(async (r) => ({ status: r.status, headers: r.headers, text: '', json: (await r.json()) as Record<string, unknown> })), 415],
    ['body_too_large', send(svc.url, 'POST', '/tokenize', h, { a: 'x'.repeat(5000) }), 413],
  ];
  for (const [code, pending, status] of cases) {
    const r = await pending;
    t.equal(r.status, status, `${code}: ${status}`);
    t.equal(r.headers.get('access-control-allow-origin'), SHOP, `${code}: readable by the page`);
  }
  // Without a key there is no public key to read it for.
  const missing = await send(svc.url, 'POST', '/tokenize', { origin: SHOP }, { a: 'x' });
  t.equal(missing.status, 401, 'missing_api_key: 401');
  t.equal(missing.headers.get('access-control-allow-origin'), null, 'missing_api_key: not readable by the page');
});
