/**
 * The path cannot escape the destination (issue 5): for a destination `<upstream>/base/`, every
 * hostile suffix is either refused (400 invalid_proxy_path, wrapped, nothing forwarded) or
 * forwarded to the same upstream under `/base/`. A second upstream plays the "other host" the
 * attacks name: it must never receive anything. Requests go out with node:http so the path is
 * sent exactly as written (fetch would normalise the dot segments away).
 */
import t from 'tap';
import { KEYS, startTestService } from '../helpers/service.js';
import { rawRequest, startUpstream } from '../helpers/upstream.js';
import { assertProxyError, configWithProxies, PROXY_KEY, PROXY_KEY_2 } from '../helpers/proxy.js';

type Expect =
  | { kind: 'refused' }
  | { kind: 'forwarded'; as: string };

t.test('hostile suffixes never leave the destination or its base path', async (t) => {
  const up = await startUpstream(t);
  const evil = await startUpstream(t);
  const E = `127.0.0.1:${evil.port}`;
  const cfg = configWithProxies([
    { id: 'p', name: 'p', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` },
  ]);
  const s = await startTestService(t, { config: cfg });
  const refused: Expect = { kind: 'refused' };
  const fwd = (as: string): Expect => ({ kind: 'forwarded', as });
  const cases: Array<[string, Expect]> = [
    // Plain dot segments, whether they stay inside /proxy or climb out of it: the path is routed
    // as sent (src/http/request-path.ts), never resolved to another route.
    ['/proxy/a/../x', refused],
    ['/proxy/a/b/../../x', refused],
    ['/proxy/./x', refused],
    ['/proxy/.', refused],
    ['/proxy/..', refused],
    ['/proxy/a/../../x', refused],
    ['/proxy/../x', refused],
    // Percent-encoded dots (WHATWG URL decodes %2e in dot segments itself).
    ['/proxy/a/%2e%2e/x', refused],
    ['/proxy/a/%2E%2E/x', refused],
    ['/proxy/%2e%2e/x', refused],
    ['/proxy/a/.%2e/x', refused],
    ['/proxy/a/%2e./x', refused],
    ['/proxy/a/%2e/x', refused],
    // Double, triple and quadruple encoding.
    ['/proxy/a/%252e%252e/x', refused],
    ['/proxy/%252e%252e/x', refused],
    ['/proxy/%252E%252E/%252e%252e/x', refused],
    ['/proxy/a/%25252e%25252e/x', refused],
    ['/proxy/a/%2525252e%2525252e/x', refused],
    // Encoded slashes and backslashes, raw backslashes.
    ['/proxy/a%2f..%2f..%2fx', refused],
    ['/proxy/%2e%2e%2f%2e%2e%2fx', refused],
    ['/proxy/a%2Fb', refused],
    ['/proxy/a%252fb', refused],
    ['/proxy/a%5c..%5cx', refused],
    ['/proxy/a%5Cb', refused],
    ['/proxy/a\\..\\x', refused],
    ['/proxy/a\\b', refused],
    [`/proxy/\\\\${E}/x`, refused],
    [`/proxy/%2f%2f${E}/x`, refused],
    [`/proxy/%5c%5c${E}/x`, refused],
    // Control characters and broken escapes.
    ['/proxy/a%00/x', refused],
    ['/proxy/a%0d%0aHost:%20x/y', refused],
    ['/proxy/a%/x', refused],
    ['/proxy/a%zz/x', refused],
    // Authority-looking suffixes are paths on the same host.
    [`/proxy//${E}/x`, fwd(`/base/${E}/x`)],
    [`/proxy///${E}/x`, fwd(`/base/${E}/x`)],
    [`/proxy/@${E}/x`, fwd(`/base/@${E}/x`)],
    [`/proxy/user:pass@${E}/x`, fwd(`/base/user:pass@${E}/x`)],
    [`/proxy/http://${E}/x`, fwd(`/base/http:/${E}/x`)],
    [`/proxy/;@${E}/x`, fwd(`/base/;@${E}/x`)],
    // Harmless look-alikes go through as they are.
    ['/proxy/a/..b/x', fwd('/base/a/..b/x')],
    ['/proxy/a/.../x', fwd('/base/a/.../x')],
    ['/proxy/a/%2e%2e%2e/x', fwd('/base/a/%2e%2e%2e/x')],
    ['/proxy/a%20b/%40c', fwd('/base/a%20b/%40c')],
    ['/proxy/x?next=../../admin&u=http://evil', fwd('/base/x?next=../../admin&u=http://evil')],
    // A fragment is not part of a request target: dropped, as the router dropped it.
    ['/proxy/x#/../../admin', fwd('/base/x')],
    ['/proxy/x?a=1#frag', fwd('/base/x?a=1')],
    ['/proxy/', fwd('/base/')],
    ['/proxy', fwd('/base')],
  ];

  for (const [path, expect] of cases) {
    const before = up.received.length;
    const headers: Record<string, string> = { 'svc-proxy-key': PROXY_KEY };
    const r = await rawRequest(s.url, { path, headers });
    const label = `${JSON.stringify(path)} (${expect.kind})`;
    if (expect.kind === 'refused') {
      assertProxyError(t, r, 400, 'invalid_proxy_path', `${label}:`);
      t.equal(up.received.length, before, `${label}: nothing forwarded`);
    } else {
      t.equal(r.status, 200, `${label}: ${r.text}`);
      t.equal(up.received.length, before + 1, `${label}: forwarded once`);
      t.equal(up.received[before]?.url, expect.as, `${label}: arrives as ${expect.as}`);
    }
  }

  // Whatever went out went to the destination, under its base path.
  t.ok(up.received.length > 0);
  for (const got of up.received) {
    t.ok(got.url === '/base' || got.url.startsWith('/base/'), `${got.url} is under /base/`);
    t.equal(got.headers.host, `127.0.0.1:${up.port}`, `${got.url}: Host is the destination's`);
  }
  t.equal(evil.received.length, 0, 'no request ever reached the other host');
});

t.test('a raw /proxy/../tokens is refused: never routed to /tokens, never forwarded', async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies([{ id: 'p', name: 'p', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` }]);
  const s = await startTestService(t, { config: cfg });
  for (const [path, headers] of [
    ['/proxy/../tokens', { 'svc-proxy-key': PROXY_KEY }],
    ['/proxy/../tokens', { 'svc-proxy-key': PROXY_KEY, 'svc-api-key': KEYS.private }],
    ['/proxy/%2e%2e/tokens', { 'svc-proxy-key': PROXY_KEY, 'svc-api-key': KEYS.private }],
  ] as const) {
    const r = await rawRequest(s.url, { path, headers });
    assertProxyError(t, r, 400, 'invalid_proxy_path', `${path} ${Object.keys(headers).join('+')}:`);
    t.notOk(Array.isArray(r.json?.data), `${path}: no token page`);
  }
  t.equal(up.received.length, 0, 'the upstream saw none of them');
});

t.test('regression: an absolute-form request target escaped the base path', async (t) => {
  // `GET http://host/proxy/x HTTP/1.1` routes to /proxy/* (the router reads the parsed path) but
  // the suffix was cut from the raw target as if it began with /proxy, so the whole URL was
  // appended to the base: the destination received `/basehttp:/host/proxy/x`.
  const up = await startUpstream(t);
  const evil = await startUpstream(t);
  const cfg = configWithProxies([
    { id: 'p', name: 'p', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` },
    { id: 'q', name: 'q', key: PROXY_KEY_2, require_auth: false, destination_url: `${up.url}/api` },
  ]);
  const s = await startTestService(t, { config: cfg });
  const E = `127.0.0.1:${evil.port}`;
  const cases: Array<[string, string, string]> = [
    [PROXY_KEY, `http://${E}/proxy/x?a=1`, '/base/x?a=1'],
    [PROXY_KEY, `HTTP://${E}/proxy/x`, '/base/x'],
    [PROXY_KEY, `http://${E}/proxy`, '/base'],
    [PROXY_KEY_2, `http://${E}/proxy/-admin`, '/api/-admin'],
  ];
  for (const [key, target, as] of cases) {
    const before = up.received.length;
    const r = await rawRequest(s.url, { path: target, headers: { 'svc-proxy-key': key } });
    if (r.status === 400) {
      assertProxyError(t, r, 400, 'invalid_proxy_path', `${target}:`);
      t.equal(up.received.length, before, `${target}: refused, nothing forwarded`);
    } else {
      t.equal(r.status, 200, `${target}: ${r.text}`);
      t.equal(up.received[before]?.url, as, `${target} → ${as}`);
    }
  }
  // Dot segments in an absolute-form target are refused like in an origin-form one.
  const dots = await rawRequest(s.url, { path: `http://${E}/proxy/a/../x`, headers: { 'svc-proxy-key': PROXY_KEY } });
  assertProxyError(t, dots, 400, 'invalid_proxy_path', 'absolute-form with ..:');
  for (const got of up.received) t.match(got.url, /^\/(base|api)(\/|$|\?)/, `${got.url} stays under the base path`);
  t.equal(evil.received.length, 0, 'the host named in the target received nothing');
});

t.test('regression: a dot segment with ;-parameters (..;) reached the destination', async (t) => {
  // Tomcat and Spring strip `;…` path parameters from a segment before resolving dot segments, so
  // `/base/..;/admin` is `/admin` to them. The suffix check compared the whole segment with `..`,
  // and `..;`, `%2e%2e;`, `..;jsessionid=x` and the like were forwarded as they were.
  const up = await startUpstream(t);
  const cfg = configWithProxies([{ id: 'p', name: 'p', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` }]);
  const s = await startTestService(t, { config: cfg });
  const refused = [
    '/proxy/..;/admin',
    '/proxy/%2e%2e;/admin',
    '/proxy/%2E%2E;/admin',
    '/proxy/.%2e;/admin',
    '/proxy/a/..;/b',
    '/proxy/a/..;/..;/b',
    '/proxy/a/..;jsessionid=x/b',
    '/proxy/..;a=b;c=d/admin',
    '/proxy/a/..;;/b',
    '/proxy/a/.;/b',
    '/proxy/a/%2e;/b',
    '/proxy/a/..%3b/b',
    '/proxy/a/..%3B/b',
    '/proxy/a/%252e%252e;/b',
    '/proxy/a/%252e%252e%253b/b',
    '/proxy/a/..;',
    '/proxy/..;',
  ];
  for (const path of refused) {
    const r = await rawRequest(s.url, { path, headers: { 'svc-proxy-key': PROXY_KEY } });
    assertProxyError(t, r, 400, 'invalid_proxy_path', `${JSON.stringify(path)}:`);
  }
  t.same(up.received.map((r) => r.url), [], 'the destination received none of them');
  // Parameters on other segments, and look-alikes, are still forwarded as sent.
  for (const [path, as] of [
    ['/proxy/a;b=1/c', '/base/a;b=1/c'],
    ['/proxy/a/...;/b', '/base/a/...;/b'],
    ['/proxy/a/..b;/c', '/base/a/..b;/c'],
    ['/proxy/a/;/b', '/base/a/;/b'],
    ['/proxy/a/x;..', '/base/a/x;..'],
  ] as const) {
    const before = up.received.length;
    const r = await rawRequest(s.url, { path, headers: { 'svc-proxy-key': PROXY_KEY } });
    t.equal(r.status, 200, `${path}: ${r.text}`);
    t.equal(up.received[before]?.url, as, `${path} → ${as}`);
  }
});
