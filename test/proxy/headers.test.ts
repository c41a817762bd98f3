/**
 * Header hygiene of the inbound proxy (RFC 9110 §7.6.1), on real sockets: what the upstream
 * receives (no SVC-* header, no hop-by-hop header, X-Forwarded-* set by us, Content-Length of
 * the body actually sent) and what the client receives (SVC-PROXY-DESTINATION-STATUS, SVC-TRACE-ID,
 * none of the upstream's hop-by-hop headers), for pass-through and transforming proxies.
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import t from 'tap';
import { startTestService } from '../helpers/service.js';
import { rawRequest, startUpstream } from '../helpers/upstream.js';
import { CARD, configWithProxies, PROXY_KEY, PROXY_KEY_2, SSN } from '../helpers/proxy.js';
import { randomMarker } from '../helpers/secrets.js';

const HOP_BY_HOP_REQUEST: Record<string, string> = {
  connection: 'keep-alive, x-foo',
  'x-foo': 'named-in-connection',
  'keep-alive': 'timeout=5',
  te: 'trailers',
  trailer: 'x-checksum',
  upgrade: 'h2c',
  'proxy-authorization': 'Basic cHJveHk6c2VjcmV0',
  'proxy-connection': 'keep-alive',
};
const SVC: Record<string, string> = {
  'svc-api-key': 'test_private_key_aaaaaaaaaaaaaaaa',
  'svc-trace-id': 'trace-abc-123',
  'svc-anything': 'internal',
  'SVC-Mixed-Case': 'internal',
};
const KEPT: Record<string, string> = {
  authorization: 'Bearer upstream-token',
  cookie: 'session=1',
  'user-agent': 'headers-test/1.0',
  accept: 'application/json',
  'x-custom': 'kept',
};

function twoProxies(upUrl: string, server: Record<string, unknown> = {}) {
  return configWithProxies(
    [
      { id: 'pass', name: 'pass', key: PROXY_KEY, require_auth: false, destination_url: `${upUrl}/base/` },
      {
        id: 'tok', name: 'tok', key: PROXY_KEY_2, require_auth: false, destination_url: `${upUrl}/base/`,
        request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/card', token: { type: 'card' } }, { pointer: '/ssn', token: { type: 'token' } }] }],
        response_transforms: [{ type: 'append_header', name: 'x-transformed', value: 'yes' }],
      },
    ],
    [],
    server,
  );
}

const PROXIES = [[PROXY_KEY, 'pass-through'], [PROXY_KEY_2, 'transforming']] as const;

t.test('SVC-* and hop-by-hop request headers stay here; the rest is forwarded', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, { config: twoProxies(up.url) });
  for (const [key, what] of PROXIES) {
    const before = up.received.length;
    const body = JSON.stringify({ a: 1 });
    const r = await rawRequest(s.url, {
      method: 'POST', path: '/proxy/h', body,
      // Chunked: node refuses a Trailer header on a body with a Content-Length.
      headers: { ...HOP_BY_HOP_REQUEST, ...SVC, ...KEPT, 'svc-proxy-key': key, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
    });
    t.equal(r.status, 200, `${what}: ${r.text}`);
    t.same(JSON.parse(up.received[before]!.body.toString()), { a: 1 }, `${what}: the body arrived`);
    const got = up.received[before]!.headers;
    // (connection is checked below: undici sends its own `keep-alive`.)
    for (const name of [...Object.keys(HOP_BY_HOP_REQUEST).filter((n) => n !== 'connection'), ...Object.keys(SVC), 'svc-proxy-key']) {
      t.equal(got[name.toLowerCase()], undefined, `${what}: ${name} not forwarded`);
    }
    t.notOk(Object.keys(got).some((n) => n.startsWith('svc-')), `${what}: no svc-* header at all upstream`);
    t.notOk(JSON.stringify(got).includes('named-in-connection'), `${what}: the value of the Connection-listed header is gone`);
    t.notOk(JSON.stringify(got).includes('cHJveHk6c2VjcmV0'), `${what}: proxy credentials are gone`);
    for (const [name, value] of Object.entries(KEPT)) t.equal(got[name], value, `${what}: ${name} forwarded`);
    t.equal(got['content-type'], 'application/json', `${what}: content-type forwarded`);
    // The connection header upstream (if any) is the forwarder's own, never the caller's list.
    t.notOk(String(got.connection ?? '').includes('x-foo'), `${what}: Connection upstream is not the caller's`);
    t.equal(r.headers['svc-trace-id'], 'trace-abc-123', `${what}: the caller's trace id is echoed back`);
  }
});

t.test('X-Forwarded-For/-Proto/-Host are set by tokenproxy; spoofed values from an untrusted peer are replaced', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, { config: twoProxies(up.url) });
  for (const [key, what] of PROXIES) {
    const before = up.received.length;
    const plain = await rawRequest(s.url, { path: '/proxy/a', headers: { 'svc-proxy-key': key } });
    t.equal(plain.status, 200, plain.text);
    const got = up.received[before]!.headers;
    t.equal(got['x-forwarded-for'], '127.0.0.1', `${what}: X-Forwarded-For is the peer`);
    t.equal(got['x-forwarded-proto'], 'http', `${what}: X-Forwarded-Proto http`);
    t.equal(got['x-forwarded-host'], new URL(s.url).host, `${what}: X-Forwarded-Host is the Host the client used`);
    t.equal(got.host, `127.0.0.1:${up.port}`, `${what}: Host is the destination's`);

    const spoofed = await rawRequest(s.url, {
      path: '/proxy/b',
      headers: {
        'svc-proxy-key': key,
        host: 'shop.example:8443',
        'x-forwarded-for': '6.6.6.6, 7.7.7.7',
        'x-forwarded-proto': 'https',
        'x-forwarded-host': 'evil.example',
        forwarded: 'for=6.6.6.6;proto=https',
      },
    });
    t.equal(spoofed.status, 200, spoofed.text);
    const g2 = up.received[before + 1]!.headers;
    t.equal(g2['x-forwarded-for'], '127.0.0.1', `${what}: a spoofed X-Forwarded-For is replaced, not appended to`);
    t.equal(g2['x-forwarded-proto'], 'http', `${what}: a spoofed X-Forwarded-Proto is replaced`);
    t.equal(g2['x-forwarded-host'], 'shop.example:8443', `${what}: X-Forwarded-Host is the Host sent, not the spoofed one`);
    t.equal(g2.forwarded, undefined, `${what}: a caller's Forwarded header is not passed on`);
    t.equal(g2.host, `127.0.0.1:${up.port}`, `${what}: Host upstream is the destination's, not the caller's`);
  }
});

t.test('from a trusted proxy the X-Forwarded-* chain is kept and extended', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, { config: twoProxies(up.url, { trust_proxy: ['127.0.0.1/32'] }) });
  const r = await rawRequest(s.url, {
    path: '/proxy/c',
    headers: { 'svc-proxy-key': PROXY_KEY, 'x-forwarded-for': '203.0.113.9', 'x-forwarded-proto': 'https', 'x-forwarded-host': 'shop.example' },
  });
  t.equal(r.status, 200, r.text);
  const got = up.received[0]!.headers;
  t.equal(got['x-forwarded-for'], '203.0.113.9, 127.0.0.1', 'the trusted chain is extended with the peer');
  t.equal(got['x-forwarded-proto'], 'https', "the trusted proxy's proto is kept");
  t.equal(got['x-forwarded-host'], 'shop.example', "the trusted proxy's host is kept");
  // Regression: trust was inferred from the client IP differing from the peer, so a trusted proxy
  // sending only X-Forwarded-Proto (no X-Forwarded-For) had it replaced.
  const r2 = await rawRequest(s.url, { path: '/proxy/d', headers: { 'svc-proxy-key': PROXY_KEY, 'x-forwarded-proto': 'https' } });
  t.equal(r2.status, 200, r2.text);
  const got2 = up.received[1]!.headers;
  t.equal(got2['x-forwarded-proto'], 'https', 'a trusted peer without X-Forwarded-For keeps its proto');
  t.equal(got2['x-forwarded-for'], '127.0.0.1', 'and X-Forwarded-For is the peer');
});

t.test('credentials in destination_url become Basic auth upstream, never shown to the caller or the log', async (t) => {
  const up = await startUpstream(t);
  const base = new URL(up.url);
  // A long random password: a fixed short one ('7f3a') turned up by chance in request ids.
  const secret = randomMarker('ss');
  const cfg = configWithProxies([
    { id: 'creds', name: 'creds', key: PROXY_KEY, require_auth: false, destination_url: `http://svc%40user:p%3A${secret}@${base.host}/base/` },
  ]);
  const s = await startTestService(t, { config: cfg });
  const r = await rawRequest(s.url, { path: '/proxy/x', headers: { 'svc-proxy-key': PROXY_KEY, authorization: 'Bearer caller-token' } });
  t.equal(r.status, 200, r.text);
  const got = up.received[0]!;
  t.equal(got.url, '/base/x');
  const basic = Buffer.from(`svc@user:p:${secret}`).toString('base64');
  t.equal(got.headers.authorization, `Basic ${basic}`, "the URL's credentials, decoded, replace the caller's Authorization");
  t.notOk(r.text.includes(secret) || JSON.stringify(r.headers).includes(secret) || r.text.includes(basic), 'not in the answer');
  t.notOk(s.logs().includes(secret) || s.logs().includes(basic), 'not in the log');
});

t.test('Content-Length at the upstream is the length of the body actually sent', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, { config: twoProxies(up.url) });
  // JSON: the card object (and the ssn) become 36-character ids; the length changes.
  const json = JSON.stringify({ card: { number: CARD, expiration_month: 1, expiration_year: 2031 }, ssn: SSN, note: 'é unicode ü' });
  const r = await rawRequest(s.url, {
    method: 'POST', path: '/proxy/json', body: json,
    headers: { 'svc-proxy-key': PROXY_KEY_2, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(json)) },
  });
  t.equal(r.status, 200, r.text);
  const got = up.received[0]!;
  t.not(got.body.length, Buffer.byteLength(json), 'the body changed length');
  t.equal(got.headers['content-length'], String(got.body.length), 'Content-Length is the new byte length (not the character count)');
  t.equal(got.headers['transfer-encoding'], undefined);
  t.equal(JSON.parse(got.body.toString()).note, 'é unicode ü');

  // Chunked in, tokenized: a fixed length out.
  const u = new URL(s.url);
  const status = await new Promise<number>((resolve, reject) => {
    const req = httpRequest(
      { host: u.hostname, port: u.port, method: 'POST', path: '/proxy/chunked', agent: false, headers: { 'svc-proxy-key': PROXY_KEY_2, 'content-type': 'application/json', 'transfer-encoding': 'chunked' } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.write(json.slice(0, 10));
    req.end(json.slice(10));
  });
  t.equal(status, 200);
  const got2 = up.received[1]!;
  t.equal(got2.headers['transfer-encoding'], undefined, 'not chunked upstream');
  t.equal(got2.headers['content-length'], String(got2.body.length), 'a chunked body is forwarded with its real length');
  t.notOk(got2.body.toString().includes(CARD));

  // A caller's wrong Content-Length can never be passed on for a transformed body: node refuses
  // a body longer than declared, so the check is that the declared length is not reused.
  const form = `card=${CARD}&x=1`;
  const r3 = await rawRequest(s.url, {
    method: 'POST', path: '/proxy/form', body: form,
    headers: { 'svc-proxy-key': PROXY_KEY_2, 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(form.length) },
  });
  t.equal(r3.status, 200, r3.text);
  const got3 = up.received[2]!;
  t.equal(got3.headers['content-length'], String(got3.body.length));
  t.not(got3.body.length, form.length);

  // Pass-through: the declared length is the caller's and matches the bytes; chunked stays chunked.
  const r4 = await rawRequest(s.url, {
    method: 'POST', path: '/proxy/p', body: json,
    headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(json)) },
  });
  t.equal(r4.status, 200);
  t.equal(up.received[3]!.headers['content-length'], String(Buffer.byteLength(json)));
  t.equal(up.received[3]!.body.toString(), json, 'pass-through bytes unchanged');
});

t.test('response headers: destination status and trace id added, upstream hop-by-hop dropped', async (t) => {
  const up = await startUpstream(t);
  up.respond((_r, res) => {
    const body = JSON.stringify({ ok: true });
    // Chunked (no length): node refuses a Trailer header next to a Content-Length.
    res.writeHead(201, {
      'content-type': 'application/json',
      connection: 'keep-alive, x-up-private',
      'x-up-private': 'hop-only',
      'keep-alive': 'timeout=7, max=3',
      'proxy-authenticate': 'Basic realm="upstream"',
      trailer: 'x-up-trailer',
      upgrade: 'h2c',
      'x-up-ok': 'kept',
      'set-cookie': ['a=1', 'b=2'],
      'svc-trace-id': 'forged-by-upstream',
      'svc-proxy-destination-status': '999',
    });
    res.end(body);
  });
  const s = await startTestService(t, { config: twoProxies(up.url) });
  for (const [key, what] of PROXIES) {
    const r = await rawRequest(s.url, { path: '/proxy/r', headers: { 'svc-proxy-key': key, 'svc-trace-id': 'client-trace-1' } });
    t.equal(r.status, 201, `${what}: ${r.text}`);
    const h: IncomingHttpHeaders = r.headers;
    t.equal(h['svc-proxy-destination-status'], '201', `${what}: destination status is the real one`);
    t.equal(h['svc-trace-id'], 'client-trace-1', `${what}: the trace id is ours, not the upstream's`);
    t.equal(h['x-up-ok'], 'kept', `${what}: an ordinary header passes`);
    t.same(h['set-cookie'], ['a=1', 'b=2'], `${what}: repeated headers pass`);
    t.equal(h['x-up-private'], undefined, `${what}: a header the upstream listed in Connection is dropped`);
    t.equal(h['proxy-authenticate'], undefined, `${what}: proxy-authenticate dropped`);
    t.equal(h.trailer, undefined, `${what}: trailer dropped`);
    t.equal(h.upgrade, undefined, `${what}: upgrade dropped`);
    t.not(h['keep-alive'], 'timeout=7, max=3', `${what}: the upstream's keep-alive is not passed on`);
    t.notOk(String(h.connection ?? '').includes('x-up-private'), `${what}: Connection is tokenproxy's own`);
    t.same(r.json, { ok: true }, `${what}: the body arrived`);
    if (what === 'transforming') {
      t.equal(h['x-transformed'], 'yes', 'response transform applied on the 2xx');
      t.equal(h['content-length'], String(r.body.length), 'a transformed answer has its own length');
    } else {
      t.equal(h['transfer-encoding'], 'chunked', 'pass-through: the body streams');
    }
  }

  // Without a trace id from the client, tokenproxy makes one.
  const r = await rawRequest(s.url, { path: '/proxy/r', headers: { 'svc-proxy-key': PROXY_KEY } });
  t.match(r.headers['svc-trace-id'], /^[0-9a-f-]{36}$/, 'a generated trace id');
});

t.test('regression: a transformed 204 or HEAD answer announced Content-Length: 0', async (t) => {
  // The 2xx path of response transforms always set the length of the (empty) collected body: a
  // 204 must not carry Content-Length at all, and a HEAD said 0 where the GET has a body.
  const up = await startUpstream(t);
  let status = 204;
  up.respond((_r, res) => {
    if (status === 204) {
      res.writeHead(204, { etag: '"v1"' });
      res.end();
      return;
    }
    const b = JSON.stringify({ a: 1 });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(b) });
    res.end(b);
  });
  const s = await startTestService(t, { config: twoProxies(up.url) });
  const none = await rawRequest(s.url, { method: 'DELETE', path: '/proxy/thing', headers: { 'svc-proxy-key': PROXY_KEY_2 } });
  t.equal(none.status, 204);
  t.equal(none.headers['content-length'], undefined, '204: no Content-Length');
  t.equal(none.headers['x-transformed'], 'yes', '204: header transforms still apply (it is a 2xx)');
  t.equal(none.headers.etag, '"v1"');
  t.equal(none.body.length, 0);

  status = 200;
  const head = await rawRequest(s.url, { method: 'HEAD', path: '/proxy/thing', headers: { 'svc-proxy-key': PROXY_KEY_2 } });
  t.equal(head.status, 200);
  t.not(head.headers['content-length'], '0', 'HEAD: not a length of 0 for a resource with a body');
  t.equal(head.headers['x-transformed'], 'yes');
  t.equal(head.body.length, 0);
  const get = await rawRequest(s.url, { method: 'GET', path: '/proxy/thing', headers: { 'svc-proxy-key': PROXY_KEY_2 } });
  t.equal(get.headers['content-length'], String(get.body.length), 'GET: the length of the body sent');
  t.same(get.json, { a: 1 });

  // On one keep-alive connection the framing stays right: fetch reuses its connection.
  for (const method of ['HEAD', 'DELETE', 'GET', 'HEAD', 'GET']) {
    status = method === 'DELETE' ? 204 : 200;
    const r = await fetch(`${s.url}/proxy/thing`, { method, headers: { 'svc-proxy-key': PROXY_KEY_2 } });
    const text = await r.text();
    t.equal(r.status, status, `${method} on a reused connection`);
    if (method === 'GET') t.equal(text, '{"a":1}');
  }
});
