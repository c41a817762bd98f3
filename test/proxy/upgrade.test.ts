/**
 * Protocol upgrades (WebSocket) through /proxy/*, relayed by http-proxy: the proxy key (and API
 * key) and the rate limit apply as for plain requests; the destination gets the upgrade at the
 * checked path, without SVC-* headers; bytes flow both ways after the 101; proxies that transform
 * or block bodies refuse upgrades; refusals are wrapped problems on the raw socket. The rate limit
 * is driven to its 429 with upgrades (sharing one counter with plain requests); a blocking proxy
 * and one with response transforms only are refused; TRACE and a Transfer-Encoding other than
 * chunked are refused on upgrades as on plain requests.
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import type { Duplex } from 'node:stream';
import t from 'tap';
import { startTestService } from '../helpers/service.js';
import { startEchoUpstream } from '../helpers/upgrade-upstream.js';
import { configWithProxies, PROXY_KEY, PROXY_KEY_2, PROXY_KEY_3 } from '../helpers/proxy.js';
import { addProxy, limitedConfig, tenant } from '../rate-limit/http-helpers.js';

const BLOCK_KEY = 'proxy_key_ws_block_0123456789ab';
const RESP_KEY = 'proxy_key_ws_resp_0123456789abc';

type UpgradeResult =
  | { kind: 'upgraded'; socket: Duplex; status: number; headers: IncomingHttpHeaders }
  | { kind: 'refused'; status: number; body: any; headers: IncomingHttpHeaders };

function upgrade(base: string, path: string, headers: Record<string, string>, method = 'GET'): Promise<UpgradeResult> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path, method, agent: false, headers: { connection: 'Upgrade', upgrade: 'websocket', ...headers } });
    req.on('upgrade', (res, socket) => resolve({ kind: 'upgraded', socket, status: res.statusCode ?? 0, headers: res.headers }));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ kind: 'refused', status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString() || 'null'), headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
}

function echo(socket: Duplex, text: string): Promise<string> {
  return new Promise((resolve) => {
    let got = '';
    socket.on('data', (c: Buffer) => {
      got += c.toString();
      if (got.length >= text.length) resolve(got);
    });
    socket.write(text);
  });
}

const up = await startEchoUpstream(t);
const s = await startTestService(t, {
  config: configWithProxies([
    { id: 'ws', name: 'ws', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` },
    { id: 'tok', name: 'tok', key: PROXY_KEY_2, require_auth: false, destination_url: `${up.url}/base/`,
      request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/card', token: { type: 'card' } }] }] },
    { id: 'auth', name: 'auth', key: PROXY_KEY_3, destination_url: `${up.url}/base/` },
    { id: 'block', name: 'block', key: BLOCK_KEY, require_auth: false, destination_url: `${up.url}/base/`, leak_guard: 'block' },
    { id: 'resp', name: 'resp', key: RESP_KEY, require_auth: false, destination_url: `${up.url}/base/`,
      response_transforms: [{ type: 'append_header', name: 'x-seen', value: 'yes' }] },
  ]),
});

t.test('an upgrade is relayed to the destination path, SVC-* headers removed, bytes echo both ways', async (t) => {
  const r = await upgrade(s.url, '/proxy/chat?room=1&svc-proxy-key=' + PROXY_KEY, { 'svc-trace-id': 'ws-trace', 'x-forwarded-for': '203.0.113.7' });
  t.equal(r.kind, 'upgraded');
  if (r.kind !== 'upgraded') return;
  t.teardown(() => r.socket.destroy());
  t.equal(r.status, 101);
  t.equal(await echo(r.socket, 'hello through the proxy'), 'hello through the proxy');
  const seen = up.seen.at(-1)!;
  t.equal(seen.url, '/base/chat?room=1', 'destination path; the key parameter removed');
  t.notOk(Object.keys(seen.headers).some((h) => h.startsWith('svc-')), 'no SVC-* header reached the destination');
  t.equal(seen.headers['x-forwarded-for'], '127.0.0.1', 'a spoofed X-Forwarded-For from an untrusted peer is replaced');
  t.equal(seen.headers.upgrade, 'websocket');
});

t.test('refusals are wrapped problems on the raw socket, and nothing reaches the destination', async (t) => {
  const before = up.seen.length;
  const none = await upgrade(s.url, '/proxy/chat', {});
  t.match(none, { kind: 'refused', status: 401, body: { proxy_error: { code: 'missing_proxy_key' } } });
  const bad = await upgrade(s.url, '/proxy/chat', { 'svc-proxy-key': 'not_a_valid_proxy_key_000000' });
  t.match(bad, { kind: 'refused', status: 401, body: { proxy_error: { code: 'invalid_proxy_key' } } });
  const auth = await upgrade(s.url, '/proxy/chat', { 'svc-proxy-key': PROXY_KEY_3 });
  t.match(auth, { kind: 'refused', status: 401, body: { proxy_error: { code: 'missing_api_key' } } }, 'require_auth applies');
  const tok = await upgrade(s.url, '/proxy/chat', { 'svc-proxy-key': PROXY_KEY_2 });
  t.match(tok, { kind: 'refused', status: 400, body: { proxy_error: { code: 'upgrade_not_allowed' } } }, 'a transforming proxy refuses upgrades');
  const escape = await upgrade(s.url, '/proxy/a/%252e%252e/x', { 'svc-proxy-key': PROXY_KEY });
  t.match(escape, { kind: 'refused', status: 400, body: { proxy_error: { code: 'invalid_proxy_path' } } }, 'the path rules apply');
  const other = await upgrade(s.url, '/tokens', { 'svc-api-key': 'test_private_key_aaaaaaaaaaaaaaaa' });
  t.match(other, { kind: 'refused', status: 404 }, 'only /proxy/* accepts upgrades');
  t.equal(up.seen.length, before, 'the destination saw none of them');
  t.notOk(s.logs().includes('not_a_valid_proxy_key'), 'the bad key is not logged');
});

t.test('the upgrade entry runs the stages of /proxy/* (issue 25): /proxy itself is no target, SVC-PROXY-URL is not an upgrade key, the trace id is echoed', async (t) => {
  const before = up.seen.length;
  const root = await upgrade(s.url, '/proxy', { 'svc-proxy-key': PROXY_KEY });
  t.match(root, { kind: 'refused', status: 404, body: { proxy_error: { code: 'route_not_found', detail: 'Only /proxy/* accepts protocol upgrades' } } }, '/proxy without a suffix');
  const other = await upgrade(s.url, '/tokens', {});
  t.match(other, { kind: 'refused', status: 404, body: { proxy_error: { code: 'route_not_found', detail: 'Only /proxy/* accepts protocol upgrades' } } }, 'another route');
  const url = await upgrade(s.url, '/proxy/chat', { 'svc-proxy-url': `${up.url}/base/`, 'svc-api-key': 'test_private_key_aaaaaaaaaaaaaaaa', 'svc-trace-id': 'trace-upgrade-1' });
  t.match(url, { kind: 'refused', status: 401, body: { proxy_error: { code: 'missing_proxy_key' } } }, 'the outbound proxy takes no upgrades');
  t.equal(url.headers['svc-trace-id'], 'trace-upgrade-1', 'the refusal carries the request id');
  t.equal(up.seen.length, before, 'the destination saw none of them');
});

t.test('a destination that is down: 502 on the raw socket', async (t) => {
  const down = await startTestService(t, {
    config: configWithProxies([{ id: 'down', name: 'down', key: PROXY_KEY, require_auth: false, destination_url: 'http://127.0.0.1:9/' }]),
  });
  const r = await upgrade(down.url, '/proxy/x', { 'svc-proxy-key': PROXY_KEY });
  t.match(r, { kind: 'refused', status: 502, body: { proxy_error: { code: 'destination_unreachable' } } });
});

t.test('a blocking proxy, and one with response transforms only, refuse upgrades: frames would pass unscanned', async (t) => {
  const before = up.seen.length;
  const block = await upgrade(s.url, '/proxy/chat', { 'svc-proxy-key': BLOCK_KEY });
  t.match(block, { kind: 'refused', status: 400, body: { proxy_error: { code: 'upgrade_not_allowed', status: 400 } } }, 'leak_guard: block');
  const resp = await upgrade(s.url, '/proxy/chat', { 'svc-proxy-key': RESP_KEY });
  t.match(resp, { kind: 'refused', status: 400, body: { proxy_error: { code: 'upgrade_not_allowed' } } }, 'response transforms');
  t.equal(up.seen.length, before, 'the destination saw neither');
  // The same proxies still forward plain requests.
  const plain = await fetch(`${s.url}/proxy/x`, { headers: { 'svc-proxy-key': BLOCK_KEY } });
  t.equal(plain.status, 200, 'a plain request through the blocking proxy');
});

t.test('an upgrade with TRACE is 405, and a Transfer-Encoding other than chunked is 501, before the destination', async (t) => {
  const before = up.seen.length;
  const trace = await upgrade(s.url, '/proxy/chat', { 'svc-proxy-key': PROXY_KEY }, 'TRACE');
  t.match(trace, { kind: 'refused', status: 405, body: { proxy_error: { code: 'method_not_allowed' } } });
  const te = await upgrade(s.url, '/proxy/chat', { 'svc-proxy-key': PROXY_KEY, 'transfer-encoding': 'gzip, chunked' }, 'POST');
  t.match(te, { kind: 'refused', status: 501, body: { proxy_error: { code: 'unsupported_transfer_encoding' } } });
  t.equal(up.seen.length, before, 'the destination saw neither');
});

t.test('the proxy rate limit counts upgrades: plain requests and upgrades share the counter, the next is 429', async (t) => {
  const limited = tenant({ custom: { proxy_endpoint: { points: 3, duration_seconds: 60 } }, apps: [{ kind: 'private' }] });
  const key = addProxy(limited, `${up.url}/limited/`);
  const rl = await startTestService(t, { config: limitedConfig([limited]) });
  const before = up.seen.length;
  const plain = await fetch(`${rl.url}/proxy/x`, { headers: { 'svc-proxy-key': key } });
  await plain.arrayBuffer();
  t.equal(plain.status, 200, 'a plain request: 1 of 3');
  for (const n of [2, 3]) {
    const r = await upgrade(rl.url, '/proxy/chat', { 'svc-proxy-key': key });
    t.equal(r.kind, 'upgraded', `upgrade ${n} of 3`);
    if (r.kind === 'upgraded') r.socket.destroy();
  }
  t.equal(up.seen.length, before + 2, 'both upgrades reached the destination');
  const over = await upgrade(rl.url, '/proxy/chat', { 'svc-proxy-key': key });
  t.match(over, { kind: 'refused', status: 429, body: { proxy_error: { code: 'rate_limited', status: 429 } } }, 'the fourth (an upgrade) is 429, wrapped');
  t.ok(over.headers['retry-after'], 'with Retry-After');
  t.equal(over.headers['ratelimit-limit'], '3', 'and the RateLimit headers');
  t.equal(up.seen.length, before + 2, 'the refused upgrade never reached the destination');
  const after = await fetch(`${rl.url}/proxy/x`, { headers: { 'svc-proxy-key': key } });
  t.equal(after.status, 429, 'a plain request after it is 429 too: one counter');
});
