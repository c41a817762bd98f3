/**
 * Proxy paths no other test took (issue 10, "Tests that do not test"): a response `code`
 * transform that succeeds; `502 destination_response_untransformable` (a compressed 2xx, a 2xx over
 * the body limit); a request with `Content-Encoding` on a tokenizing proxy (415, nothing forwarded
 * or stored); array-index pointers (`/cards/0`, `/people/1/ssn`); a proxy key configured as
 * `key_sha256`.
 */
import { createHash } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { KEYS, startTestService, TENANT_A } from '../helpers/service.js';
import { startUpstream } from '../helpers/upstream.js';
import { assertProxyError, CARD, configWithProxies, PROXY_KEY, PROXY_KEY_2, SSN } from '../helpers/proxy.js';

const hdr = (key: string) => ({ 'svc-proxy-key': key });
const transform = (body: string) => `module.exports = async function (req) {\n  const { args: { body, headers, method, path, query }, configuration } = req;\n  ${body}\n};`;

t.test('a response code transform that works: its body and headers are the answer', async (t) => {
  const up = await startUpstream(t);
  up.respond((r, res) => {
    const body = JSON.stringify({ order: 7, status: 'paid', echo: r.url });
    res.writeHead(201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-upstream': 'u1' });
    res.end(body);
  });
  const s = await startTestService(t, {
    config: configWithProxies([
      { id: 'resp', name: 'resp', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/`, configuration: { suffix: '!' },
        response_transforms: [{ type: 'code', code: transform(
          `return { body: { ...body, status: body.status + configuration.suffix, seen: { method, path, q: query.q, upstream: headers['x-upstream'] } }, headers: { ...headers, 'x-transformed': 'yes' } };`,
        ) }] },
    ]),
  });
  const r = await s.call('POST', '/proxy/orders/7?q=1', { key: null, headers: hdr(PROXY_KEY), body: { a: 1 } });
  t.equal(r.status, 201, r.text);
  t.same(r.body, { order: 7, status: 'paid!', echo: '/base/orders/7?q=1', seen: { method: 'POST', path: '/orders/7', q: '1', upstream: 'u1' } });
  t.equal(r.headers.get('x-transformed'), 'yes', 'headers the transform returned');
  t.equal(r.headers.get('x-upstream'), 'u1', "the destination's headers it kept");
  t.equal(Number(r.headers.get('content-length')), Buffer.byteLength(r.text), 'Content-Length of the transformed body');
  t.equal(r.headers.get('svc-proxy-destination-status'), '201');
  t.equal(up.received[0]!.headers['accept-encoding'], 'identity', 'asked for an uncompressed body');
});

t.test('502 destination_response_untransformable: a compressed 2xx, and a 2xx over the body limit', async (t) => {
  const up = await startUpstream(t);
  const json = JSON.stringify({ card_token: null, filler: 'x'.repeat(2_000) });
  up.respond((r, res) => {
    if (r.url.endsWith('/gzip')) {
      // A destination that compresses although asked for identity.
      const gz = gzipSync(json);
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip', 'content-length': gz.length });
      res.end(gz);
    } else if (r.url.endsWith('/big')) {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
      res.end(json);
    } else {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    }
  });
  const s = await startTestService(t, {
    config: configWithProxies(
      [{ id: 'rt', name: 'rt', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/`,
        response_transforms: [{ type: 'append_header', name: 'x-seen', value: 'yes' }] }],
      [],
      { body_limit_bytes: 1_024 },
    ),
  });
  const gz = await s.call('GET', '/proxy/gzip', { key: null, headers: hdr(PROXY_KEY) });
  assertProxyError(t, gz, 502, 'destination_response_untransformable', 'compressed 2xx:');
  t.match(gz.body.proxy_error.detail, /Content-Encoding/);
  const big = await s.call('GET', '/proxy/big', { key: null, headers: hdr(PROXY_KEY) });
  assertProxyError(t, big, 502, 'destination_response_untransformable', '2xx over 1,024 bytes:');
  t.match(big.body.proxy_error.detail, /1024 bytes/);
  t.equal(big.headers.get('svc-proxy-destination-status'), null, 'a tokenproxy error: no destination status');
  const small = await s.call('GET', '/proxy/small', { key: null, headers: hdr(PROXY_KEY) });
  t.equal(small.status, 200, 'a small identity 2xx is transformed');
  t.equal(small.headers.get('x-seen'), 'yes');
  t.equal(up.received.length, 3, 'each request did reach the destination');
});

t.test('a request with Content-Encoding on a tokenizing proxy is 415: nothing forwarded, no token', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, {
    config: configWithProxies([
      { id: 'tok', name: 'tok', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/`,
        request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/ssn', token: { type: 'token' } }] }] },
    ]),
  });
  const raw = gzipSync(JSON.stringify({ ssn: SSN })).toString('latin1');
  for (const encoding of ['gzip', 'deflate', 'br', 'gzip, identity']) {
    const r = await s.call('POST', '/proxy/x', { key: null, raw, headers: { ...hdr(PROXY_KEY), 'content-type': 'application/json', 'content-encoding': encoding } });
    assertProxyError(t, r, 415, 'unsupported_media_type', `Content-Encoding: ${encoding}:`);
    t.match(r.body.proxy_error.detail, /Content-Encoding/);
  }
  t.equal(up.received.length, 0, 'nothing forwarded');
  const list = await s.call('GET', '/tokens', { key: KEYS.private });
  t.same(list.body.data, [], 'no token stored');
  const identity = await s.call('POST', '/proxy/x', { key: null, body: { ssn: SSN }, headers: { ...hdr(PROXY_KEY), 'content-encoding': 'identity' } });
  t.equal(identity.status, 200, 'identity is no encoding');
  t.notOk(up.received[0]!.body.toString().includes(SSN), 'and it was tokenized');
});

t.test('array-index pointers: /cards/0 and /people/1/ssn tokenize that element; a missing index is skipped', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, {
    config: configWithProxies([
      { id: 'arr', name: 'arr', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/`,
        request_transforms: [{ type: 'tokenize', identifier: 'pay', fields: [
          { pointer: '/cards/0', token: { type: 'card' } },
          { pointer: '/people/1/ssn', token: { type: 'token' } },
          { pointer: '/people/5/ssn', token: { type: 'token' } },
        ] }],
        response_transforms: [
          { type: 'append_header', name: 'x-card', value: '{{ tokens.pay.cards["0"].id }}' },
          { type: 'append_header', name: 'x-ssn', value: '{{ tokens.pay.people["1"].ssn.id }}' },
        ] },
    ]),
  });
  const other = '5555555555554444';
  const body = { cards: [{ number: CARD, expiration_month: 12, expiration_year: 2030 }, { number: other }], people: [{ ssn: '111-11-1111' }, { ssn: SSN }] };
  const r = await s.call('POST', '/proxy/x', { key: null, body, headers: hdr(PROXY_KEY) });
  t.equal(r.status, 200, r.text);
  const sent = JSON.parse(up.received[0]!.body.toString());
  t.match(sent.cards[0], /^[0-9a-f-]{36}$/, '/cards/0 replaced by an id');
  t.same(sent.cards[1], { number: other }, '/cards/1 untouched (no pointer names it)');
  t.same(sent.people[0], { ssn: '111-11-1111' }, '/people/0 untouched');
  t.match(sent.people[1].ssn, /^[0-9a-f-]{36}$/, '/people/1/ssn replaced by an id');
  t.equal(sent.people.length, 2, 'the missing /people/5 was skipped, nothing added');
  t.equal(r.headers.get('x-card'), sent.cards[0], 'tokens.pay.cards["0"].id');
  t.equal(r.headers.get('x-ssn'), sent.people[1].ssn, 'tokens.pay.people["1"].ssn.id');
  const card = await s.call('GET', `/tokens/${sent.cards[0]}`, { key: KEYS.private });
  t.equal(card.body.data.number, CARD);
  const ssn = await s.call('GET', `/tokens/${sent.people[1].ssn}`, { key: KEYS.private });
  t.equal(ssn.body.data, SSN);
  t.equal(ssn.body.tenant_id, TENANT_A);
});

t.test('a proxy key configured as key_sha256 authenticates with the key, not with its hash', async (t) => {
  const up = await startUpstream(t);
  const sha = createHash('sha256').update(PROXY_KEY_2).digest('hex');
  const s = await startTestService(t, {
    config: configWithProxies([
      { id: 'hashed', name: 'hashed', key_sha256: sha, require_auth: false, destination_url: `${up.url}/hashed/` },
      { id: 'upper', name: 'upper', key_sha256: createHash('sha256').update(PROXY_KEY).digest('hex').toUpperCase(), require_auth: false, destination_url: `${up.url}/upper/` },
    ]),
  });
  const ok = await s.call('GET', '/proxy/x', { key: null, headers: hdr(PROXY_KEY_2) });
  t.equal(ok.status, 200, ok.text);
  t.equal(up.received.at(-1)?.url, '/hashed/x', 'the proxy whose key hashes to key_sha256');
  const q = await s.call('GET', `/proxy/q?svc-proxy-key=${PROXY_KEY_2}`, { key: null });
  t.equal(q.status, 200, 'also as the query parameter');
  const upper = await s.call('GET', '/proxy/x', { key: null, headers: hdr(PROXY_KEY) });
  t.equal(upper.status, 200, 'key_sha256 in upper-case hex');
  t.equal(up.received.at(-1)?.url, '/upper/x');
  const before = up.received.length;
  assertProxyError(t, await s.call('GET', '/proxy/x', { key: null, headers: hdr(sha) }), 401, 'invalid_proxy_key', 'the hash itself:');
  assertProxyError(t, await s.call('GET', '/proxy/x', { key: null, headers: hdr(`${PROXY_KEY_2}x`) }), 401, 'invalid_proxy_key', 'another key:');
  t.equal(up.received.length, before, 'nothing forwarded for either');
  t.notOk(s.logs().includes(PROXY_KEY_2), 'the key is not logged');
});
