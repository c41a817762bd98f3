/**
 * Forwarding through the inbound proxy on real sockets: form-encoded bodies tokenized by pointer,
 * query strings (the svc-proxy-key parameter removed, any case), every method with its body,
 * require_auth true and false, wrong / missing proxy keys, proxy keys of another tenant, and a
 * 100 MB streamed pass-through body with flat memory.
 */
import { request as httpRequest } from 'node:http';
import t from 'tap';
import { KEYS, startTestService } from '../helpers/service.js';
import { rawRequest, startUpstream } from '../helpers/upstream.js';
import { assertProxyError, CARD, configWithProxies, PROXY_KEY, PROXY_KEY_2, PROXY_KEY_B, SSN } from '../helpers/proxy.js';

const FORM = 'application/x-www-form-urlencoded';

t.test('form-encoded body: fields tokenized by pointer, the upstream receives a form with ids', async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies([
    {
      id: 'form', name: 'form', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/`,
      request_transforms: [{ type: 'tokenize', fields: [
        { pointer: '/card_number', token: { type: 'card' } },
        { pointer: '/ssn', token: { type: 'token' } },
        { pointer: '/absent', token: { type: 'token' } },
      ] }],
    },
  ]);
  const s = await startTestService(t, { config: cfg });
  const sent = `name=Ada+Lovelace&card_number=${CARD}&ssn=${encodeURIComponent(SSN)}&amount=100`;
  const r = await s.call('POST', '/proxy/charges', { key: null, raw: sent, headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': `${FORM}; charset=utf-8` } });
  t.equal(r.status, 200, r.text);
  t.equal(up.received.length, 1);
  const got = up.received[0]!;
  t.equal(got.method, 'POST');
  t.equal(got.url, '/base/charges');
  t.equal(got.headers['content-type'], `${FORM}; charset=utf-8`, 'content type passed as sent');
  const text = got.body.toString('utf8');
  t.notOk(text.includes(CARD), 'no card number upstream');
  t.notOk(text.includes(SSN) || text.includes(encodeURIComponent(SSN)), 'no ssn upstream');
  t.equal(Number(got.headers['content-length']), got.body.length, 'content-length is the length of the new form');
  const form = new URLSearchParams(text);
  t.same([...form.keys()], ['name', 'card_number', 'ssn', 'amount'], 'field order kept');
  t.equal(form.get('name'), 'Ada Lovelace', 'other fields untouched');
  t.equal(form.get('amount'), '100');
  const cardId = form.get('card_number')!;
  const ssnId = form.get('ssn')!;
  t.match(cardId, /^[0-9a-f-]{36}$/, 'card replaced by a token id');
  t.match(ssnId, /^[0-9a-f-]{36}$/, 'ssn replaced by a token id');
  t.not(cardId, ssnId);

  const card = await s.call('GET', `/tokens/${cardId}`, { key: KEYS.private });
  t.equal(card.status, 200, card.text);
  t.equal(card.body.type, 'card');
  t.same(card.body.data, { number: CARD }, 'the form value became {number: value}');
  const ssn = await s.call('GET', `/tokens/${ssnId}`, { key: KEYS.private });
  t.equal(ssn.status, 200, ssn.text);
  t.equal(ssn.body.type, 'token');
  t.equal(ssn.body.data, SSN);

  // A repeated field: each value becomes its own token.
  const twice = await s.call('POST', '/proxy/batch', { key: null, raw: `ssn=111-11-1111&ssn=222-22-2222`, headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': FORM } });
  t.equal(twice.status, 200, twice.text);
  const ids = new URLSearchParams(up.received[1]!.body.toString()).getAll('ssn');
  t.equal(ids.length, 2);
  const values = await Promise.all(ids.map(async (id) => (await s.call('GET', `/tokens/${id}`, { key: KEYS.private })).body.data));
  t.same(values, ['111-11-1111', '222-22-2222']);

  // A form without the configured fields is forwarded byte for byte.
  const plain = await s.call('POST', '/proxy/x', { key: null, raw: 'a=1&b=%7E', headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': FORM } });
  t.equal(plain.status, 200);
  t.equal(up.received[2]!.body.toString(), 'a=1&b=%7E');
});

t.test('regression: tokenizing a form field moved it to the end of the form', async (t) => {
  // The form's replace deleted the field and appended it again; receivers that verify a
  // signature over the form, or read fields by position, saw a different body.
  const up = await startUpstream(t);
  const cfg = configWithProxies([
    {
      id: 'form', name: 'form', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/`,
      request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/ssn', token: { type: 'token' } }, { pointer: '/card', token: { type: 'card' } }] }],
    },
  ]);
  const s = await startTestService(t, { config: cfg });
  const r = await s.call('POST', '/proxy/f', {
    key: null,
    raw: `a=1&ssn=111-11-1111&b=2&card=${CARD}&ssn=222-22-2222&c=3`,
    headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': FORM },
  });
  t.equal(r.status, 200, r.text);
  const form = [...new URLSearchParams(up.received[0]!.body.toString())];
  t.same(form.map(([k]) => k), ['a', 'ssn', 'b', 'card', 'ssn', 'c'], 'every field where it was');
  t.same([form[0]![1], form[2]![1], form[5]![1]], ['1', '2', '3']);
  const read = async (id: string) => (await s.call('GET', `/tokens/${id}`, { key: KEYS.private })).body.data;
  t.equal(await read(form[1]![1]), '111-11-1111', 'first ssn in first place');
  t.equal(await read(form[4]![1]), '222-22-2222', 'second ssn in its place');
  t.same(await read(form[3]![1]), { number: CARD });
});

t.test('query strings are forwarded; the svc-proxy-key parameter is removed in any case', async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies([
    { id: 'q', name: 'q', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` },
    { id: 'fixed', name: 'fixed', key: PROXY_KEY_2, require_auth: false, destination_url: `${up.url}/v1?fixed=yes` },
  ]);
  const s = await startTestService(t, { config: cfg });
  const cases: Array<{ path: string; headers?: Record<string, string>; expect: string }> = [
    { path: '/proxy/items?a=1&b=two%20words&c=%26&d', headers: { 'svc-proxy-key': PROXY_KEY }, expect: '/base/items?a=1&b=two%20words&c=%26&d' },
    { path: `/proxy/items?svc-proxy-key=${PROXY_KEY}&a=1`, expect: '/base/items?a=1' },
    { path: `/proxy/items?a=1&SVC-PROXY-KEY=${PROXY_KEY}`, expect: '/base/items?a=1' },
    { path: `/proxy/items?Svc-Proxy-Key=${PROXY_KEY}&a=1&b=2`, expect: '/base/items?a=1&b=2' },
    { path: `/proxy/items?svc%2Dproxy%2Dkey=${PROXY_KEY}&a=1`, expect: '/base/items?a=1' },
    { path: `/proxy/items?svc-proxy-key=${PROXY_KEY}`, expect: '/base/items' },
    // Sent in the header, a parameter of that name (even a stale other key) is still removed.
    { path: '/proxy/items?svc-proxy-key=stale_other_value&z=9', headers: { 'svc-proxy-key': PROXY_KEY }, expect: '/base/items?z=9' },
    { path: `/proxy?svc-proxy-key=${PROXY_KEY_2}&a=1`, expect: '/v1?fixed=yes&a=1' },
    { path: '/proxy/sub/path/?k=v', headers: { 'svc-proxy-key': PROXY_KEY_2 }, expect: '/v1/sub/path/?fixed=yes&k=v' },
  ];
  for (const [i, c] of cases.entries()) {
    const r = await rawRequest(s.url, { path: c.path, headers: c.headers ?? {} });
    t.equal(r.status, 200, `${c.path}: ${r.text}`);
    t.equal(up.received[i]?.url, c.expect, `${c.path} → ${c.expect}`);
    t.notOk(up.received[i]?.url.toLowerCase().includes('svc-proxy-key'), 'no key parameter upstream');
    t.notOk(up.received[i]?.url.includes(PROXY_KEY) || up.received[i]?.url.includes(PROXY_KEY_2), 'no key value upstream');
  }
  t.equal(up.received.length, cases.length);
  t.notOk(s.logs().includes(PROXY_KEY), 'the key in a query is never logged');
});

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

t.test('every method reaches the upstream with its method and body', async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies([
    { id: 'pass', name: 'pass', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` },
    {
      id: 'tok', name: 'tok', key: PROXY_KEY_2, require_auth: false, destination_url: `${up.url}/tok/`,
      request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/ssn', token: { type: 'token' } }] }],
    },
  ]);
  const s = await startTestService(t, { config: cfg });
  for (const method of METHODS) {
    for (const [key, prefix] of [[PROXY_KEY, '/base'], [PROXY_KEY_2, '/tok']] as const) {
      const before = up.received.length;
      const body = method === 'HEAD' ? undefined : JSON.stringify({ method, ssn: SSN, n: 1 });
      const headers: Record<string, string> = { 'svc-proxy-key': key };
      if (body !== undefined) {
        headers['content-type'] = 'application/json';
        headers['content-length'] = String(Buffer.byteLength(body));
      }
      const r = await rawRequest(s.url, { method, path: `/proxy/m/${method.toLowerCase()}?q=${method}`, headers, body });
      t.equal(r.status, 200, `${method} ${prefix}: ${r.text}`);
      t.equal(r.headers['svc-proxy-destination-status'], '200');
      t.equal(up.received.length, before + 1, `${method} ${prefix}: one request upstream`);
      const got = up.received[before]!;
      t.equal(got.method, method, `${method} ${prefix}: method`);
      t.equal(got.url, `${prefix}/m/${method.toLowerCase()}?q=${method}`, `${method} ${prefix}: path and query`);
      if (method === 'HEAD') {
        t.equal(r.body.length, 0, 'HEAD: no body to the client');
        t.equal(got.body.length, 0, 'HEAD: no body upstream');
        continue;
      }
      t.equal(Number(got.headers['content-length']), got.body.length, `${method} ${prefix}: content-length matches`);
      const json = JSON.parse(got.body.toString());
      t.equal(json.method, method, `${method} ${prefix}: body arrived`);
      t.equal(json.n, 1);
      if (prefix === '/base') {
        t.equal(got.body.toString(), body, `${method}: pass-through body byte for byte`);
      } else {
        t.not(json.ssn, SSN, `${method}: ssn tokenized`);
        const tok = await s.call('GET', `/tokens/${json.ssn}`, { key: KEYS.private });
        t.equal(tok.body.data, SSN, `${method}: token reads back`);
      }
      t.same(r.json, { ok: true, method, url: got.url, length: got.body.length }, `${method}: the upstream's answer reaches the client`);
    }
  }
});

t.test('require_auth true: a proxy:invoke API key of the same tenant is required', async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies(
    [{ id: 'auth', name: 'auth', key: PROXY_KEY, destination_url: `${up.url}/base/` }],
    [{ id: 'b', name: 'b', key: PROXY_KEY_B, destination_url: `${up.url}/b/` }],
  );
  const s = await startTestService(t, { config: cfg });
  const send = (headers: Record<string, string>) => s.call('POST', '/proxy/x', { key: null, body: { a: 1 }, headers });

  assertProxyError(t, await send({ 'svc-proxy-key': PROXY_KEY }), 401, 'missing_api_key', 'no API key:');
  assertProxyError(t, await send({ 'svc-proxy-key': PROXY_KEY, 'svc-api-key': 'no_such_key_0123456789abcdef' }), 401, 'invalid_api_key', 'unknown API key:');
  assertProxyError(t, await send({ 'svc-proxy-key': PROXY_KEY, 'svc-api-key': KEYS.noPerm }), 403, 'forbidden', 'key without proxy:invoke:');
  assertProxyError(t, await send({ 'svc-proxy-key': PROXY_KEY, 'svc-api-key': KEYS.public }), 403, 'forbidden', 'public key without proxy:invoke:');
  assertProxyError(t, await send({ 'svc-proxy-key': PROXY_KEY, 'svc-api-key': KEYS.tenantB }), 403, 'forbidden', 'API key of another tenant:');
  // A proxy key of tenant B with tenant A's API key.
  assertProxyError(t, await send({ 'svc-proxy-key': PROXY_KEY_B, 'svc-api-key': KEYS.private }), 403, 'forbidden', "tenant B's proxy with tenant A's key:");
  t.equal(up.received.length, 0, 'nothing was forwarded for any refused request');

  const ok = await send({ 'svc-proxy-key': PROXY_KEY, 'svc-api-key': KEYS.private });
  t.equal(ok.status, 200, ok.text);
  t.equal(up.received.length, 1);
  t.equal(up.received[0]!.url, '/base/x');
  t.equal(up.received[0]!.headers['svc-api-key'], undefined, 'the API key does not go upstream');
  const okB = await send({ 'svc-proxy-key': PROXY_KEY_B, 'svc-api-key': KEYS.tenantB });
  t.equal(okB.status, 200, okB.text);
  t.equal(up.received[1]!.url, '/b/x', "tenant B's key opens tenant B's proxy");
  // The proxy key in the query with the API key in the header.
  const viaQuery = await s.call('GET', `/proxy/q?svc-proxy-key=${PROXY_KEY}`, { key: KEYS.private });
  t.equal(viaQuery.status, 200, viaQuery.text);
  t.equal(up.received[2]!.url, '/base/q');
});

t.test('require_auth false: the proxy key alone is enough', async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies([{ id: 'open', name: 'open', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` }]);
  const s = await startTestService(t, { config: cfg });
  const r = await s.call('POST', '/proxy/x', { key: null, body: { a: 1 }, headers: { 'svc-proxy-key': PROXY_KEY } });
  t.equal(r.status, 200, r.text);
  t.equal(up.received.length, 1);
  // An API key that could not invoke proxies does not hurt either: it is simply not needed.
  const withKey = await s.call('POST', '/proxy/y', { key: KEYS.noPerm, body: { a: 1 }, headers: { 'svc-proxy-key': PROXY_KEY } });
  t.equal(withKey.status, 200, withKey.text);
  t.equal(up.received.length, 2);
});

t.test('a wrong or missing proxy key is 401, wrapped, and nothing is forwarded', async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies(
    [
      { id: 'open', name: 'open', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` },
      { id: 'auth', name: 'auth', key: PROXY_KEY_2, destination_url: `${up.url}/base/` },
    ],
  );
  const s = await startTestService(t, { config: cfg });
  assertProxyError(t, await s.call('POST', '/proxy/x', { key: null, body: { a: 1 } }), 401, 'missing_proxy_key', 'no proxy key:');
  assertProxyError(t, await s.call('POST', '/proxy/x', { key: KEYS.private, body: { a: 1 } }), 401, 'missing_proxy_key', 'only an API key:');
  assertProxyError(t, await s.call('POST', '/proxy/x', { key: null, body: { a: 1 }, headers: { 'svc-proxy-key': 'proxy_key_wrong_0123456789abcdef' } }), 401, 'invalid_proxy_key', 'wrong proxy key:');
  assertProxyError(t, await s.call('GET', '/proxy/x?svc-proxy-key=proxy_key_wrong_0123456789abcdef', { key: KEYS.private }), 401, 'invalid_proxy_key', 'wrong key in the query:');
  // An API key is not a proxy key, and the proxy key with different case is a different key.
  assertProxyError(t, await s.call('POST', '/proxy/x', { key: null, body: { a: 1 }, headers: { 'svc-proxy-key': KEYS.private } }), 401, 'invalid_proxy_key', 'API key as proxy key:');
  assertProxyError(t, await s.call('POST', '/proxy/x', { key: null, body: { a: 1 }, headers: { 'svc-proxy-key': PROXY_KEY.toUpperCase() } }), 401, 'invalid_proxy_key', 'upper-cased key:');
  assertProxyError(t, await s.call('POST', '/proxy/x', { key: KEYS.private, body: { a: 1 }, headers: { 'svc-proxy-key': 'proxy_key_wrong_0123456789abcdef' } }), 401, 'invalid_proxy_key', 'wrong proxy key with a good API key:');
  t.equal(up.received.length, 0, 'nothing forwarded');
});

t.test('a 100 MB pass-through body streams with flat memory', async (t) => {
  let arrived = 0;
  const up = await startUpstream(t, { record: false, onData: (n) => (arrived += n) });
  const cfg = configWithProxies([{ id: 'big', name: 'big', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` }]);
  const s = await startTestService(t, { config: cfg });
  const MB = 1024 * 1024;
  const TOTAL_MB = 100;
  // Letters only: no digits, so the leak guard (log, the default) scans and finds nothing.
  const chunk = Buffer.alloc(MB, 'abcdefghijklmnopqrstuvwxyz ');
  await new Promise((r) => setTimeout(r, 50));
  const baseline = process.memoryUsage().rss;
  let peak = baseline;
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 20);
  t.teardown(() => clearInterval(sampler));
  const u = new URL(s.url);
  /** The most the sender was ever ahead of what had reached the upstream. */
  let maxAhead = 0;
  const res = await new Promise<{ status: number; body: string; headers: Record<string, unknown> }>((resolve, reject) => {
    const req = httpRequest(
      {
        host: u.hostname, port: u.port, method: 'POST', path: '/proxy/upload', agent: false,
        headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': 'application/octet-stream', 'content-length': String(TOTAL_MB * MB) },
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    let sent = 0;
    const pump = () => {
      while (sent < TOTAL_MB) {
        sent++;
        maxAhead = Math.max(maxAhead, sent * MB - arrived);
        if (!req.write(chunk)) {
          req.once('drain', pump);
          return;
        }
      }
      req.end();
    };
    pump();
  });
  clearInterval(sampler);
  peak = Math.max(peak, process.memoryUsage().rss);
  t.equal(res.status, 200, res.body);
  t.equal(up.received.length, 1);
  const got = up.received[0]! as unknown as { size: number; url: string; headers: Record<string, string> };
  t.equal(got.size, TOTAL_MB * MB, 'the upstream got exactly 100 MB');
  t.equal(got.url, '/base/upload');
  t.equal(got.headers['content-length'], String(TOTAL_MB * MB), 'the declared length passes through');
  t.equal(JSON.parse(res.body).length, 0, 'the upstream (not recording) answered');
  const growthMb = (peak - baseline) / MB;
  // Flat memory, counted rather than weighed (issue 30): buffering the body would hold all 100 MB
  // before the upstream got a byte, so the sender would be 100 MB ahead; streamed with backpressure
  // it is never more ahead than the socket and stream buffers between them, whatever the load. RSS
  // (the sender, the proxy and the upstream share this heap, and passed chunks wait for the
  // collector: 65.6 MB seen once on Node 24 with other files running) is printed, not asserted.
  t.ok(maxAhead < 32 * MB, `the sender was at most ${(maxAhead / MB).toFixed(1)} MB ahead of the upstream (buffering: 100 MB)`);
  t.comment(`RSS growth ${growthMb.toFixed(1)} MB while 100 MB passed through`);
  t.notOk(s.logs().includes('leak guard'), 'no false leak finding in letters');
});
