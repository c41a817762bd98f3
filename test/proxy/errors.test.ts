/**
 * The inbound proxy's failures on real sockets: a destination that is down (502) or never answers
 * (504 within the proxy timeout), code transforms that throw (their status, or 500), 4xx/5xx
 * answers of the destination passed through without the response transforms, a field of the wrong
 * shape (400, nothing forwarded, no token), invalid JSON (400) and a body over the limit (413).
 * Every error of tokenproxy itself comes wrapped as {"proxy_error": {…}}.
 */
import { request as httpRequest } from 'node:http';
import t from 'tap';
import { freePort } from '../helpers/redis.js';
import { KEYS, startTestService } from '../helpers/service.js';
import { checkResponses } from '../helpers/openapi.js';
import { rawRequest, startUpstream } from '../helpers/upstream.js';
import { endlessResponder } from '../helpers/endless.js';
import { assertProxyError, CARD, configWithProxies, PROXY_KEY, PROXY_KEY_2, SSN } from '../helpers/proxy.js';

const hdr = (key: string) => ({ 'svc-proxy-key': key });

t.test('destination down: 502 destination_unreachable, wrapped, no destination status', async (t) => {
  const port = await freePort(); // bound and released: nothing listens on it
  const cfg = configWithProxies([
    { id: 'pass', name: 'pass', key: PROXY_KEY, require_auth: false, destination_url: `http://127.0.0.1:${port}/base/` },
    {
      id: 'tok', name: 'tok', key: PROXY_KEY_2, require_auth: false, destination_url: `http://127.0.0.1:${port}/base/`,
      request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/ssn', token: { type: 'token' } }] }],
    },
  ]);
  const s = await startTestService(t, { config: cfg });
  await checkResponses(s);
  for (const [key, what] of [[PROXY_KEY, 'pass-through'], [PROXY_KEY_2, 'tokenizing']] as const) {
    for (const method of ['GET', 'POST'] as const) {
      const r = await s.call(method, '/proxy/x', { key: null, headers: hdr(key), ...(method === 'POST' ? { body: { ssn: SSN } } : {}) });
      assertProxyError(t, r, 502, 'destination_unreachable', `${what} ${method}:`);
      t.equal(r.headers.get('svc-proxy-destination-status'), null, `${what} ${method}: no destination status`);
      t.ok(r.headers.get('svc-trace-id'), 'the trace id is still there');
      t.notOk(r.text.includes(String(port)), 'the error does not name the destination');
    }
  }
  t.notOk(s.logs().includes(SSN), 'the ssn is not in the logs');
});

t.test('destination slow: 504 destination_timeout within the proxy timeout', async (t) => {
  const up = await startUpstream(t);
  up.respond(() => {
    // Never answers.
  });
  const cfg = configWithProxies([
    { id: 'pass', name: 'pass', key: PROXY_KEY, require_auth: false, timeout_ms: 300, destination_url: `${up.url}/base/` },
    {
      id: 'tok', name: 'tok', key: PROXY_KEY_2, require_auth: false, timeout_ms: 300, destination_url: `${up.url}/base/`,
      request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/ssn', token: { type: 'token' } }] }],
    },
  ]);
  const s = await startTestService(t, { config: cfg });
  await checkResponses(s);
  for (const [key, what] of [[PROXY_KEY, 'pass-through'], [PROXY_KEY_2, 'tokenizing']] as const) {
    const started = Date.now();
    const r = await s.call('POST', '/proxy/slow', { key: null, headers: hdr(key), body: { ssn: SSN } });
    const ms = Date.now() - started;
    assertProxyError(t, r, 504, 'destination_timeout', `${what}:`);
    t.equal(r.headers.get('svc-proxy-destination-status'), null, `${what}: no destination status`);
    t.ok(ms >= 250, `${what}: waited for the timeout (${ms} ms)`);
    t.ok(ms < 5000, `${what}: answered within 5 s of a 300 ms timeout (${ms} ms)`);
  }
  t.equal(up.received.length, 2, 'both requests reached the upstream');
});

t.test('destination stalls mid-body: the client never takes a cut-off body as whole', async (t) => {
  const up = await startUpstream(t);
  up.respond((_r, res) => {
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '1000' });
    res.write('partial');
    // ...and never the rest.
  });
  const cfg = configWithProxies([{ id: 'pass', name: 'pass', key: PROXY_KEY, require_auth: false, timeout_ms: 300, destination_url: `${up.url}/base/` }]);
  const s = await startTestService(t, { config: cfg });
  await checkResponses(s);
  const u = new URL(s.url);
  const outcome = await new Promise<string>((resolve) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path: '/proxy/x', headers: hdr(PROXY_KEY), agent: false }, (res) => {
      let got = '';
      res.on('data', (c) => (got += c));
      res.on('end', () => resolve(`complete:${res.statusCode}:${got}`));
      res.on('error', () => resolve(`aborted:${res.statusCode}:${got}`));
      res.on('aborted', () => resolve(`aborted:${res.statusCode}:${got}`));
    });
    req.on('error', (e) => resolve(`error:${(e as NodeJS.ErrnoException).code}`));
    req.end();
  });
  t.match(outcome, /^(aborted|error)/, `the response was cut, not ended (${outcome})`);
});

t.test('the caller hangs up mid-response: the destination request is abandoned, the service keeps serving', async (t) => {
  const up = await startUpstream(t);
  let destinationClosed: () => void = () => {};
  const closed = new Promise<void>((r) => (destinationClosed = r));
  up.respond(endlessResponder(() => destinationClosed()));
  const cfg = configWithProxies([{ id: 'pass', name: 'pass', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` }]);
  const s = await startTestService(t, { config: cfg });
  await checkResponses(s);
  const u = new URL(s.url);
  const got = await new Promise<number>((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path: '/proxy/big', headers: hdr(PROXY_KEY), agent: false }, (res) => {
      let n = 0;
      res.on('data', (c: Buffer) => {
        n += c.length;
        if (n >= 256 * 1024) {
          req.destroy();
          resolve(n);
        }
      });
    });
    req.on('error', () => {});
    req.on('close', () => resolve(-1));
    req.end();
    setTimeout(() => reject(new Error('no data')), 10_000).unref();
  });
  t.ok(got >= 256 * 1024, `the caller read ${got} bytes, then hung up`);
  const outcome = await Promise.race([closed.then(() => 'closed'), new Promise((r) => setTimeout(() => r('still open'), 10_000).unref())]);
  t.equal(outcome, 'closed', 'the destination connection was closed, not drained into nowhere');
  const after = await s.call('POST', '/proxy/x', { key: null, headers: hdr(PROXY_KEY), body: { a: 1 } });
  t.equal(after.status, 200, 'the next request is served');
});

t.test('a large response to a slow reader streams with backpressure and arrives whole', async (t) => {
  const up = await startUpstream(t);
  const size = 64 * 1024 * 1024;
  let sent = 0;
  up.respond((_r, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(size) });
    const chunk = Buffer.alloc(64 * 1024);
    for (let i = 0; i < chunk.length; i++) chunk[i] = i % 251;
    const pump = () => {
      while (sent < size) {
        sent += chunk.length;
        if (!res.write(chunk)) return;
      }
      res.end();
    };
    res.on('drain', pump);
    pump();
  });
  const cfg = configWithProxies([{ id: 'pass', name: 'pass', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/` }]);
  const s = await startTestService(t, { config: cfg });
  await checkResponses(s);
  const u = new URL(s.url);
  let sentWhilePaused = -1;
  const result = await new Promise<{ bytes: number; ok: boolean }>((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path: '/proxy/big', headers: hdr(PROXY_KEY), agent: false }, (res) => {
      let bytes = 0;
      let ok = res.statusCode === 200;
      let paused = false;
      res.on('data', (c: Buffer) => {
        for (let i = 0; i < c.length; i += 4099) if (c[i] !== ((bytes + i) % (64 * 1024)) % 251) ok = false;
        bytes += c.length;
        if (!paused && bytes >= 1024 * 1024) {
          // A reader that stops: a proxy without backpressure would take the whole 64 MB from the
          // destination meanwhile and hold it in memory. The pause lasts until the destination has
          // stopped sending (no progress for 300 ms, at least 1 s in all, at most 20 s), not a fixed
          // second (issue 30): on a loaded machine a proxy without backpressure could have pulled
          // less than the bound in one second, and the check could not fail.
          paused = true;
          res.pause();
          const pausedAt = performance.now();
          let last = sent;
          let still = performance.now();
          const watch = setInterval(() => {
            const now = performance.now();
            if (sent !== last) [last, still] = [sent, now];
            if ((now - pausedAt >= 1000 && now - still >= 300) || now - pausedAt >= 20_000 || sent >= size) {
              clearInterval(watch);
              sentWhilePaused = sent;
              res.resume();
            }
          }, 20);
        }
      });
      res.on('end', () => resolve({ bytes, ok }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
  t.equal(result.bytes, size, 'every byte arrived');
  t.ok(result.ok, "the bytes are the destination's, in order");
  t.ok(sentWhilePaused > 0 && sentWhilePaused < 24 * 1024 * 1024, `the destination was held back while the caller paused (${Math.round(sentWhilePaused / 1024 / 1024)} MB of 64 sent)`);
});

t.test('code transforms that throw, and one that works', async (t) => {
  const up = await startUpstream(t);
  const transform = (body: string) => `module.exports = async function (req) {\n  const { args: { body, headers, method, path, query }, configuration } = req;\n  ${body}\n};`;
  const cfg = configWithProxies([
    {
      id: 'deny', name: 'deny', key: 'proxy_key_code_deny_0123456789', require_auth: false, destination_url: `${up.url}/base/`,
      request_transforms: [{ type: 'code', code: transform(`throw { status: 403, message: 'no' };`) }],
    },
    {
      id: 'boom', name: 'boom', key: 'proxy_key_code_boom_0123456789', require_auth: false, destination_url: `${up.url}/base/`,
      request_transforms: [{ type: 'code', code: transform(`throw new Error('boom');`) }],
    },
    {
      id: 'resp', name: 'resp', key: 'proxy_key_code_resp_0123456789', require_auth: false, destination_url: `${up.url}/base/`,
      response_transforms: [{ type: 'code', code: transform(`throw { status: 402, message: 'pay first' };`) }],
    },
    {
      id: 'ok', name: 'ok', key: 'proxy_key_code_okok_0123456789', require_auth: false, destination_url: `${up.url}/base/`,
      configuration: { tag: 'from-config' },
      request_transforms: [{ type: 'code', code: transform(`return { body: { ...body, tag: configuration.tag, seen: { method, path, q: query.q } }, headers: { ...headers, 'x-added': 'yes' } };`) }],
    },
  ]);
  const s = await startTestService(t, { config: cfg });
  await checkResponses(s);

  const deny = await s.call('POST', '/proxy/x', { key: null, headers: hdr('proxy_key_code_deny_0123456789'), body: { a: 1 } });
  assertProxyError(t, deny, 403, 'reactor_error', 'thrown {status: 403}:');
  t.equal(deny.body.proxy_error.detail, 'no', 'the thrown message is the detail');

  const boom = await s.call('POST', '/proxy/x', { key: null, headers: hdr('proxy_key_code_boom_0123456789'), body: { a: 1 } });
  assertProxyError(t, boom, 500, 'reactor_runtime_error', 'thrown Error:');
  t.same(boom.body.proxy_error.errors, { error: ['boom'] });
  t.equal(up.received.length, 0, 'a failed request transform forwards nothing');

  // A response transform that throws: the request went out, the answer is the transform's error.
  const resp = await s.call('POST', '/proxy/x', { key: null, headers: hdr('proxy_key_code_resp_0123456789'), body: { a: 1 } });
  assertProxyError(t, resp, 402, 'reactor_error', 'response transform thrown {status: 402}:');
  t.equal(up.received.length, 1);

  // The working transform sees the contract's args and its result is what goes upstream.
  const ok = await s.call('PUT', '/proxy/p/q?q=42', { key: null, headers: hdr('proxy_key_code_okok_0123456789'), body: { a: 1 } });
  t.equal(ok.status, 200, ok.text);
  const got = up.received[1]!;
  t.same(JSON.parse(got.body.toString()), { a: 1, tag: 'from-config', seen: { method: 'PUT', path: '/p/q', q: '42' } });
  t.equal(got.headers['x-added'], 'yes');
  t.equal(Number(got.headers['content-length']), got.body.length);
});

t.test('4xx and 5xx of the destination pass through untransformed', async (t) => {
  const up = await startUpstream(t);
  let answer = { status: 200, body: '' };
  up.respond((_r, res) => {
    res.writeHead(answer.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(answer.body) });
    res.end(answer.body);
  });
  const cfg = configWithProxies([
    {
      id: 'resp', name: 'resp', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/`,
      response_transforms: [
        { type: 'mask', pattern: 'secret=([a-z]+)', character: '*' },
        { type: 'append_json', location: '/added', value: 'yes' },
        { type: 'append_header', name: 'x-appended', value: 'yes' },
      ],
    },
  ]);
  const s = await startTestService(t, { config: cfg });
  await checkResponses(s);

  // Control: on a 2xx every response transform applies.
  answer = { status: 201, body: JSON.stringify({ note: 'secret=abc' }) };
  const ok = await s.call('POST', '/proxy/x', { key: null, headers: hdr(PROXY_KEY), body: {} });
  t.equal(ok.status, 201);
  t.same(ok.body, { note: 'secret=***', added: 'yes' }, '2xx: mask and append_json applied');
  t.equal(ok.headers.get('x-appended'), 'yes', '2xx: header appended');
  t.equal(ok.headers.get('svc-proxy-destination-status'), '201');

  for (const status of [400, 404, 409, 422, 500, 502, 503]) {
    answer = { status, body: JSON.stringify({ error: 'upstream says no', note: 'secret=abc' }) };
    const r = await s.call('POST', '/proxy/x', { key: null, headers: hdr(PROXY_KEY), body: {} });
    t.equal(r.status, status, `${status} passes through`);
    t.equal(r.text, answer.body, `${status}: body byte for byte, not masked, nothing appended`);
    t.equal(r.headers.get('x-appended'), null, `${status}: no header appended`);
    t.equal(r.headers.get('svc-proxy-destination-status'), String(status), `${status}: destination status`);
    t.equal(r.headers.get('content-length'), String(Buffer.byteLength(answer.body)), `${status}: length kept`);
    t.equal(r.body.proxy_error, undefined, `${status}: not wrapped: it is the destination's answer`);
  }
});

t.test('a field of the wrong shape is 400: nothing forwarded, no token created', async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies([
    {
      id: 'tok', name: 'tok', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/`,
      request_transforms: [
        { type: 'tokenize', fields: [{ pointer: '/ssn', token: { type: 'token' } }] },
        { type: 'tokenize', fields: [{ pointer: '/card', token: { type: 'card' } }] },
      ],
    },
  ]);
  const s = await startTestService(t, { config: cfg });
  await checkResponses(s);
  const bad: Array<[string, unknown]> = [
    ['a string at a card pointer', { ssn: SSN, card: CARD }],
    ['a Luhn-invalid number', { ssn: SSN, card: { number: '4242424242424241' } }],
    ['an unknown card field', { ssn: SSN, card: { number: CARD, pin: '1234' } }],
    ['a number as number', { ssn: SSN, card: { number: 4242424242424242 } }],
  ];
  for (const [what, body] of bad) {
    const r = await s.call('POST', '/proxy/x', { key: null, headers: hdr(PROXY_KEY), body });
    assertProxyError(t, r, 400, 'validation_failed', `${what}:`);
    t.ok(Object.keys(r.body.proxy_error.errors ?? {}).some((k) => k.startsWith('card')), `${what}: the error names the field`);
    t.notOk(r.text.includes(CARD) || r.text.includes(SSN) || r.text.includes('4242424242424241'), `${what}: the value is not quoted`);
  }
  t.equal(up.received.length, 0, 'nothing was forwarded');
  const list = await s.call('GET', '/tokens', { key: KEYS.private });
  t.equal(list.status, 200, list.text);
  t.same(list.body.data, [], 'no token was created, not even the valid ssn of an earlier step');
  t.notOk(s.logs().includes(CARD), 'no card number in the logs');
});

t.test('invalid JSON is 400 and a body over the limit is 413, wrapped', async (t) => {
  const up = await startUpstream(t);
  const LIMIT = 64 * 1024;
  const cfg = configWithProxies(
    [
      {
        id: 'tok', name: 'tok', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/`,
        request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/ssn', token: { type: 'token' } }] }],
      },
    ],
    [],
    { body_limit_bytes: LIMIT },
  );
  const s = await startTestService(t, { config: cfg });
  await checkResponses(s);

  const bad = await s.call('POST', '/proxy/x', { key: null, raw: '{"ssn": "123-45-6789",', headers: { ...hdr(PROXY_KEY), 'content-type': 'application/json' } });
  assertProxyError(t, bad, 400, 'invalid_json', 'invalid JSON:');
  t.notOk(bad.text.includes(SSN), 'the body is not quoted back');

  const big = JSON.stringify({ ssn: SSN, pad: 'x'.repeat(LIMIT) });
  const declared = await rawRequest(s.url, {
    method: 'POST', path: '/proxy/x', body: big,
    headers: { ...hdr(PROXY_KEY), 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(big)) },
  });
  assertProxyError(t, declared, 413, 'body_too_large', 'declared length over the limit:');

  // Chunked, no length: the limit holds while reading.
  const u = new URL(s.url);
  const chunked = await new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = httpRequest(
      { host: u.hostname, port: u.port, method: 'POST', path: '/proxy/x', agent: false, headers: { ...hdr(PROXY_KEY), 'content-type': 'application/json', 'transfer-encoding': 'chunked' } },
      (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    for (let i = 0; i < 8; i++) req.write(big.slice(i * (big.length / 8), (i + 1) * (big.length / 8)));
    req.end();
  });
  t.equal(chunked.status, 413, chunked.text);
  t.match(JSON.parse(chunked.text), { proxy_error: { code: 'body_too_large', status: 413 } });

  // Just under the limit goes through.
  const fits = JSON.stringify({ ssn: SSN, pad: 'x'.repeat(LIMIT - 100) });
  const r = await s.call('POST', '/proxy/x', { key: null, raw: fits, headers: { ...hdr(PROXY_KEY), 'content-type': 'application/json' } });
  t.equal(r.status, 200, r.text.slice(0, 200));
  t.equal(up.received.length, 1, 'only the request within the limit was forwarded');
  const list = await s.call('GET', '/tokens', { key: KEYS.private });
  t.equal(list.body.data.length, 1, 'only the forwarded request created a token');
});
