/**
 * A request target is routed as sent: a dot segment (`.` or `..`, plain or percent-encoded in any
 * case, also `.%2e` and `%2e.`) is refused with 400 on every route, never resolved into another
 * route. A front proxy that exposes only `/proxy/` or `/elements/` must not be walked around with
 * `/proxy/%2e%2e/metrics`. And a transfer coding the service does not apply (`gzip, chunked`) is
 * 501 on every route, as it was on the proxy already.
 *
 * Requests go out with node:http (or a raw socket) so the path is sent exactly as written: fetch
 * would resolve the dot segments itself.
 */
import { connect } from 'node:net';
import t from 'tap';
import { KEYS, startTestService } from '../helpers/service.js';
import { rawRequest, startUpstream, type RawResponse } from '../helpers/upstream.js';
import { assertProxyError, configWithProxies, PROXY_KEY } from '../helpers/proxy.js';

/** Prometheus text exposition starts its families with these comments. */
const PROMETHEUS = /^# (HELP|TYPE) /m;

interface Ctx {
  equal(...args: any[]): unknown;
  match(...args: any[]): unknown;
  notOk(...args: any[]): unknown;
}

/** A 400 that no route answered: a problem body, or the proxy's wrapped one on /proxy/*. */
function assertRefused(t: Ctx, r: RawResponse, label: string): void {
  t.equal(r.status, 400, `${label}: 400 (${r.text.slice(0, 200)})`);
  const problem = (r.json as { proxy_error?: { code?: string }; code?: string } | undefined);
  const code = problem?.proxy_error?.code ?? problem?.code;
  t.match(code, /^invalid_(proxy_)?path$/, `${label}: ${code}`);
  t.notOk(PROMETHEUS.test(r.text), `${label}: no Prometheus text`);
  t.notOk(Array.isArray((r.json as { data?: unknown } | undefined)?.data), `${label}: no token page`);
}

t.test('dot segments are refused on every route, never resolved to another one', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, { config: configWithProxies([{ id: 'p', name: 'p', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` }]) });
  const proxyKey = { 'svc-proxy-key': PROXY_KEY };
  const both = { 'svc-proxy-key': PROXY_KEY, 'svc-api-key': KEYS.private };
  const priv = { 'svc-api-key': KEYS.private };

  // The controls: what the targets below would have reached.
  const metrics = await rawRequest(s.url, { path: '/metrics' });
  t.equal(metrics.status, 200, '/metrics is served on this listener');
  t.match(metrics.text, PROMETHEUS, 'as Prometheus text');
  const list = await rawRequest(s.url, { path: '/tokens', headers: priv });
  t.equal(list.status, 200, 'GET /tokens answers a page to the private key');

  const cases: Array<[string, Record<string, string>]> = [
    ['/proxy/%2e%2e/metrics', proxyKey],
    ['/proxy/%2E%2E/metrics', proxyKey],
    ['/proxy/.%2e/metrics', proxyKey],
    ['/proxy/%2e./metrics', proxyKey],
    ['/proxy/%2E./metrics', proxyKey],
    ['/proxy/../metrics', proxyKey],
    ['/proxy/a/%2e%2e/%2e%2e/metrics', proxyKey],
    ['/proxy/%2e%2e/metrics', {}],
    ['/proxy/%2e%2e/tokens', both],
    ['/proxy/%2e%2e/tokens', priv],
    ['/proxy/../tokens', both],
    ['/proxy/%2e/%2e%2e/tokens', both],
    // The outbound proxy's request (SVC-PROXY-URL, a private key) takes the same path.
    ['/proxy/%2e%2e/tokens', { ...priv, 'svc-proxy-url': `${up.url}/x` }],
    ['/elements/v1/%2e%2e/%2e%2e/tokens', priv],
    ['/elements/v1/%2e%2e/%2e%2e/metrics', {}],
    ['/elements/v1/..%2f..%2f/../../tokens', priv],
    ['/v2/%2e%2e/tokens', priv],
    ['/tokens/%2e%2e', priv],
    ['/tokens/.', priv],
    ['/tokens/search/%2E%2E', priv],
    ['/%2e%2e/tokens', priv],
    ['/%2e/metrics', {}],
    ['/metrics/.', {}],
    // A backslash is a separator to WHATWG URL parsers (and so to some front proxies).
    ['/proxy\\..\\tokens', both],
    ['/proxy/%2e%2e\\metrics', proxyKey],
  ];
  for (const [path, headers] of cases) {
    const r = await rawRequest(s.url, { path, headers });
    assertRefused(t, r, `${JSON.stringify(path)} ${Object.keys(headers).join('+') || 'no key'}`);
  }
  // Also for a method the path does not have, and for a preflight.
  assertRefused(t, await rawRequest(s.url, { method: 'DELETE', path: '/v2/%2e%2e/tokenize', headers: priv }), 'DELETE /v2/%2e%2e/tokenize');
  assertRefused(t, await rawRequest(s.url, { method: 'OPTIONS', path: '/x/%2e%2e/tokenize', headers: { origin: 'https://shop.example', 'access-control-request-method': 'POST' } }), 'a preflight');
  t.equal(up.received.length, 0, 'the destination received none of them');

  // A path under /proxy/* keeps the proxy's wrapped code.
  assertProxyError(t, await rawRequest(s.url, { path: '/proxy/a/%2e%2e/x', headers: proxyKey }), 400, 'invalid_proxy_path');
  // Every other route answers the problem unwrapped, with its own code.
  const tokens = await rawRequest(s.url, { path: '/v2/%2e%2e/tokens', headers: priv });
  t.match(tokens.json, { code: 'invalid_path', status: 400, type: 'urn:tokenproxy:problem:invalid_path' });
  t.notOk(tokens.text.includes('%2e'), 'the path is not echoed');

  // Look-alikes are no dot segments: routed as sent.
  for (const [path, headers, status] of [
    ['/tokens/..a', priv, 404],
    ['/tokens/%2e%2e%2e', priv, 404],
    ['/tokens/a.', priv, 404],
  ] as const) {
    const r = await rawRequest(s.url, { path, headers });
    t.equal(r.status, status, `${path}: ${r.text.slice(0, 200)}`);
    t.equal((r.json as { code?: string } | undefined)?.code, 'not_found', `${path}: the token route answered`);
  }
  const fwd = await rawRequest(s.url, { path: '/proxy/a/.../x', headers: proxyKey });
  t.equal(fwd.status, 200, `/proxy/a/.../x is forwarded: ${fwd.text.slice(0, 200)}`);
  t.equal(up.received.at(-1)?.url, '/base/a/.../x');
});

t.test('a target is not parsed as a URL for routing: //host/… and backslashes reach no route', async (t) => {
  const s = await startTestService(t);
  const priv = { 'svc-api-key': KEYS.private };
  // A WHATWG URL parser reads `//proxy/tokens/%41` as host `proxy`, path `/tokens/%41`.
  for (const path of ['//proxy/tokens/%41', '//x/v2/tokens%3f', '/tokens\\%41']) {
    const r = await rawRequest(s.url, { path, headers: priv });
    t.equal(r.status, 404, `${path}: 404`);
    t.equal((r.json as { code?: string } | undefined)?.code, 'route_not_found', `${path}: no route, not the token route`);
  }
  // The absolute form names the same path as the origin form.
  const abs = await rawRequest(s.url, { path: `http://127.0.0.1/tokens?size=1`, headers: priv });
  t.equal(abs.status, 200, `absolute-form: ${abs.text.slice(0, 200)}`);
  const absDots = await rawRequest(s.url, { path: `http://127.0.0.1/proxy/%2e%2e/tokens`, headers: priv });
  t.equal(absDots.status, 400, 'absolute-form with dot segments: 400');
});

/** Sends `head` on a raw socket and resolves with the status line of the answer. */
function rawStatus(base: string, head: string): Promise<string> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(u.port), u.hostname, () => socket.write(head));
    let got = '';
    socket.on('data', (c: Buffer) => {
      got += c.toString('latin1');
      const eol = got.indexOf('\r\n');
      if (eol !== -1) {
        socket.destroy();
        resolve(got.slice(0, eol));
      }
    });
    socket.on('error', reject);
    socket.on('end', () => resolve(got.split('\r\n')[0] ?? ''));
  });
}

t.test('an upgrade request with a dot segment is refused too', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, { config: configWithProxies([{ id: 'p', name: 'p', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` }]) });
  for (const path of ['/proxy/%2e%2e/metrics', '/proxy/a/%2E%2E/x', '/proxy/../x']) {
    const line = await rawStatus(s.url, `GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSVC-PROXY-KEY: ${PROXY_KEY}\r\n\r\n`);
    t.match(line, /^HTTP\/1\.1 400 /, `${path}: ${line}`);
  }
  t.equal(up.received.length, 0);
});

t.test('a transfer coding the service does not apply is 501 on every route', async (t) => {
  const s = await startTestService(t);
  const before = await s.call('GET', '/tokens?size=100');
  for (const path of ['/tokenize', '/tokens']) {
    for (const te of ['gzip, chunked', 'deflate, chunked', 'GZIP,chunked']) {
      const r = await rawRequest(s.url, {
        method: 'POST', path,
        headers: { 'svc-api-key': KEYS.private, 'content-type': 'application/json', 'transfer-encoding': te },
        body: JSON.stringify(path === '/tokens' ? { type: 'token', data: 'x' } : { a: 'x' }),
      });
      t.equal(r.status, 501, `${path} with ${te}: 501 (${r.text.slice(0, 200)})`);
      t.match(r.json, { code: 'unsupported_transfer_encoding', status: 501 }, `${path} with ${te}: the problem`);
    }
  }
  const after = await s.call('GET', '/tokens?size=100');
  t.equal(after.body.data.length, before.body.data.length, 'nothing was created');
  // The coding everyone understands still works.
  const chunked = await rawRequest(s.url, {
    method: 'POST', path: '/tokenize',
    headers: { 'svc-api-key': KEYS.private, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
    body: JSON.stringify({ a: 'x' }),
  });
  t.equal(chunked.status, 200, `chunked alone: ${chunked.text.slice(0, 200)}`);
  // Before the key is looked at: the framing is refused whoever sends it.
  const noKey = await rawRequest(s.url, { method: 'POST', path: '/tokenize', headers: { 'content-type': 'application/json', 'transfer-encoding': 'gzip, chunked' }, body: '{}' });
  t.equal(noKey.status, 501, 'without a key too');
});
