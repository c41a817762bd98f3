/**
 * The outbound proxy end to end (README "Outbound proxy"): the real service on port 0, real
 * upstreams on port 0 (one over HTTPS with a private CA made at test time). Every refusal proves
 * that nothing was sent by the upstream recording nothing; at the end, every error body and log
 * line is scanned for the card, the cvc and the API key.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { ConfigError } from '../../src/config/load.js';
import { buildModel } from '../../src/model/compile.js';
import { KEYS, TENANT_A, baseConfig, call, startTestService } from '../helpers/service.js';
import { startChild, writeConfig } from '../helpers/process.js';
import { assertProxyError, PROXY_KEY } from '../helpers/proxy.js';
import { cardPattern, cvcPattern, randomCard, randomCvc } from '../helpers/secrets.js';
import { makeTestCa, opensslSkip } from '../helpers/tls.js';
import { rawRequest, startUpstream, type Received } from '../helpers/upstream.js';

const CARD = randomCard('4');
const CVC = randomCvc();
const USE_KEY = 'test_use_key_ffffffffffffffffffffff';
const NO_USE_KEY = 'test_nouse_key_gggggggggggggggggggg';
const ALL = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search', 'proxy:invoke', 'token:use'];

/** Tenant A gains a key with token:use (and proxy:invoke), one without, and an allow-list. */
function outboundConfig(allowed: unknown[], proxies: object[] = []): Record<string, any> {
  const cfg = baseConfig() as Record<string, any>;
  const a = cfg.tenants[0];
  a.applications.push(
    { id: 'aaaaaaaa-0000-4000-8000-0000000000a1', name: 'user', type: 'private', keys: [USE_KEY], permissions: ALL,
      rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: ALL }] },
    { id: 'aaaaaaaa-0000-4000-8000-0000000000a2', name: 'no-use', type: 'private', keys: [NO_USE_KEY], permissions: ALL.filter((p) => p !== 'token:use'),
      rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: ALL.filter((p) => p !== 'token:use') }] },
  );
  a.outbound = { allowed_destinations: allowed };
  a.proxies = proxies;
  return cfg;
}

type Answer = { status: number; headers: Headers; body: any; text: string };

t.test('outbound proxy', async (t) => {
  const up = await startUpstream(t);
  // Never echoes what it got: a plaintext in any answer below would be our leak, not the upstream's.
  up.respond((_r, res) => {
    res.writeHead(201, { 'content-type': 'application/json', 'x-upstream': 'yes' });
    res.end('{"charged":true}');
  });
  // A second upstream that only a redirect (or a wrong allow-list check) could reach.
  const internal = await startUpstream(t);
  const s = await startTestService(t, {
    config: outboundConfig([up.url, 'https://*.example.invalid']),
  });
  const audit = async () => (await s.svc.store.audit.auditRange(TENANT_A, null, 10_000)).items.filter((e) => e !== null);
  const errors: Answer[] = [];
  const send = async (url: string | null, o: { key?: string | null; body?: unknown; raw?: string; headers?: Record<string, string>; path?: string; method?: string } = {}) => {
    const headers: Record<string, string> = { ...(o.headers ?? {}) };
    if (url !== null) headers['svc-proxy-url'] = url;
    const r = await call(s.url, o.method ?? 'POST', o.path ?? '/proxy', { key: o.key === undefined ? USE_KEY : o.key, body: o.body, raw: o.raw, headers });
    if (r.status >= 400) errors.push(r);
    return r;
  };
  const created = await call(s.url, 'POST', '/tokens', { body: { type: 'card', data: { number: CARD, expiration_month: 7, expiration_year: 2031, cvc: CVC } } });
  t.equal(created.status, 201, created.text);
  const id: string = created.body.id;
  const note = await call(s.url, 'POST', '/tokens', { body: { type: 'token', data: 'order-77' } });
  t.equal(note.status, 201, note.text);
  const noteId: string = note.body.id;

  t.test('JSON body, header values and query are detokenized; the answer streams back', async (t) => {
    const before = up.received.length;
    const r = await send(`${up.url}/v1?fixed=1`, {
      path: `/proxy/charges?ref=${encodeURIComponent(`{{ ${noteId} }}`)}&plain=x`,
      body: { card: `{{ token: ${id} | json: '$.data.number' }}`, cvc: `{{ ${id} | json: '$.cvc' }}`, amount: 100, month: `{{ ${id} | json: '$.expiration_month' }}` },
      headers: { 'x-ref': `ref {{ token: ${noteId} | json: '$.data' }}`, authorization: 'Bearer upstream-secret' },
    });
    t.equal(r.status, 201, r.text);
    t.equal(r.headers.get('svc-proxy-destination-status'), '201');
    t.equal(r.headers.get('x-upstream'), 'yes');
    t.equal(r.text, '{"charged":true}', 'the body comes back untouched');
    t.equal(up.received.length, before + 1);
    const got = up.received.at(-1)!;
    t.same(JSON.parse(got.body.toString()), { card: CARD, cvc: CVC, amount: 100, month: 7 });
    t.equal(got.url, '/v1/charges?fixed=1&ref=order-77&plain=x');
    t.equal(got.headers['x-ref'], 'ref order-77');
    t.equal(got.headers.authorization, 'Bearer upstream-secret', "the destination's own headers pass");
    for (const name of Object.keys(got.headers)) t.notOk(name.startsWith('svc-'), `${name} is not forwarded`);
    t.notOk(JSON.stringify(got.headers).includes(USE_KEY), 'the API key is not forwarded');
    t.notOk(got.headers['x-forwarded-for'], 'no X-Forwarded-For to a third party');
    const events = (await audit()).filter((e) => e.request_id === r.headers.get('svc-trace-id'));
    t.equal(events.length, 1, 'one audit event for the use');
    t.match(events[0], { action: 'proxy.outbound', destination: up.url, application_id: 'aaaaaaaa-0000-4000-8000-0000000000a1' });
    t.same([...events[0]!.token_ids].sort(), [id, noteId].sort());
    t.notMatch(JSON.stringify(events), cardPattern(CARD), 'no value in the event');
  });

  t.test('form and text bodies', async (t) => {
    const form = await send(up.url, {
      raw: `number=${encodeURIComponent(`{{ token: ${id} | json: '$.data.number' }}`)}&memo=a+b`,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    t.equal(form.status, 201, form.text);
    t.equal(up.received.at(-1)!.body.toString(), `number=${CARD}&memo=a+b`);
    const text = await send(up.url, { raw: `card={{ ${id} | json: '$.number' }};`, headers: { 'content-type': 'text/plain' } });
    t.equal(text.status, 201, text.text);
    t.equal(up.received.at(-1)!.body.toString(), `card=${CARD};`);
    const none = await send(up.url, { raw: 'no expressions {{ a b }}', headers: { 'content-type': 'text/plain' } });
    t.equal(none.status, 201);
    t.equal(up.received.at(-1)!.body.toString(), 'no expressions {{ a b }}', 'text in braces that is no expression stays');
  });

  t.test('egress refusals send nothing', async (t) => {
    const cases: Array<[string, number, string]> = [
      [`http://127.0.0.1:${internal.port}/`, 403, 'destination_not_allowed'],
      [`http://localhost:${internal.port}/`, 403, 'destination_not_allowed'],
      [`http://127.0.0.2:${up.port}/`, 403, 'destination_not_allowed'],
      [`http://[::1]:${up.port}/`, 403, 'destination_not_allowed'],
      [`http://[::ffff:127.0.0.1]:${up.port}/`, 403, 'destination_not_allowed'],
      ['http://169.254.169.254/latest/meta-data/', 403, 'destination_not_allowed'],
      [`https://127.0.0.1:${up.port}/`, 403, 'destination_not_allowed'],
      // A wildcard entry over single-label hosts (http://*:<port>) is refused at load (issue 23); a
      // wildcard name that resolves to loopback is refused in test/proxy/egress.test.ts (resolve).
      [`http://localhost:${up.port}/`, 403, 'destination_not_allowed'],
      ['https://nowhere.example.invalid/', 502, 'destination_unresolvable'],
      ['ftp://example.com/', 400, 'invalid_proxy_url'],
      [`http://user:pw@127.0.0.1:${up.port}/`, 400, 'invalid_proxy_url'],
      ['not a url', 400, 'invalid_proxy_url'],
    ];
    const before = [up.received.length, internal.received.length];
    const eventsBefore = (await audit()).length;
    for (const [url, status, code] of cases) {
      const r = await send(url, { body: { card: `{{ token: ${id} | json: '$.data.number' }}` } });
      assertProxyError(t, r, status, code, url);
    }
    t.same([up.received.length, internal.received.length], before, 'no upstream received anything');
    t.equal((await audit()).length, eventsBefore, 'a refused destination uses no token: no audit event');
  });

  t.test('a redirect is passed back, never followed', async (t) => {
    up.respond((_r, res) => {
      res.writeHead(302, { location: `http://127.0.0.1:${internal.port}/steal`, 'content-length': '0' });
      res.end();
    });
    t.teardown(() =>
      up.respond((_r, res) => {
        res.writeHead(201, { 'content-type': 'application/json', 'x-upstream': 'yes' });
        res.end('{"charged":true}');
      }),
    );
    // node:http, which follows nothing (fetch would follow the 302 itself).
    const r = await rawRequest(s.url, {
      method: 'POST', path: '/proxy',
      headers: { 'svc-api-key': USE_KEY, 'svc-proxy-url': up.url, 'content-type': 'application/json' },
      body: JSON.stringify({ card: `{{ token: ${id} | json: '$.data.number' }}` }),
    });
    t.equal(r.status, 302);
    t.equal(r.headers['svc-proxy-destination-status'], '302');
    t.equal(r.headers.location, `http://127.0.0.1:${internal.port}/steal`);
    t.equal(internal.received.length, 0, 'the redirect target received nothing');
  });

  t.test('token:use and keys: a failure sends nothing', async (t) => {
    const before = up.received.length;
    const body = { card: `{{ token: ${id} | json: '$.data.number' }}` };
    // issue 30: the status and the code README "Detokenization" gives for each
    assertProxyError(t, await send(up.url, { key: NO_USE_KEY, body }), 403, 'forbidden', 'a key without token:use');
    assertProxyError(t, await send(up.url, { body: { card: '{{ token: 00000000-0000-4000-8000-000000000000 }}', other: `{{ ${id} }}` } }), 400, 'unknown_token', 'an unknown token');
    assertProxyError(t, await send(up.url, { body: { card: `{{ token: ${id} | nosuchfilter }}` } }), 400, 'unknown_filter', 'an unknown filter');
    assertProxyError(t, await send(up.url, { key: null, body }), 401, 'missing_api_key');
    assertProxyError(t, await send(up.url, { key: KEYS.public, body }), 403, 'forbidden', 'a public key');
    assertProxyError(t, await send(up.url, { key: KEYS.tenantB, body }), 403, 'destination_not_allowed', "tenant B's (empty) list");
    assertProxyError(t, await send(up.url, { body, headers: { 'svc-proxy-key': PROXY_KEY } }), 400, 'invalid_proxy_url', 'both keys');
    const crlf = await call(s.url, 'POST', '/tokens', { body: { type: 'token', data: 'a\r\nx-evil: 1' } });
    assertProxyError(t, await send(up.url, { headers: { 'x-h': `{{ ${crlf.body.id} }}` } }), 400, 'validation_failed', 'a line break into a header');
    t.equal(up.received.length, before, 'the upstream received nothing');
    t.equal((await audit()).filter((e) => e.application_id === 'aaaaaaaa-0000-4000-8000-0000000000a2').length, 0, 'a denied use writes no event');
  });

  t.test('the body limit holds', async (t) => {
    const small = await startTestService(t, { config: { ...outboundConfig([up.url]), server: { host: '127.0.0.1', port: 0, body_limit_bytes: 1024 } } });
    const before = up.received.length;
    const r = await call(small.url, 'POST', '/proxy', { key: USE_KEY, raw: 'x'.repeat(4096), headers: { 'svc-proxy-url': up.url, 'content-type': 'text/plain' } });
    assertProxyError(t, r, 413, 'body_too_large');
    t.equal(up.received.length, before);
  });

  t.test('nothing secret in error bodies or logs', async (t) => {
    t.ok(errors.length >= 15, `${errors.length} error answers scanned`);
    const out = errors.map((e) => e.text + JSON.stringify([...e.headers])).join('\n') + s.logs();
    t.notMatch(out, cardPattern(CARD), 'no card number');
    t.notMatch(out, cvcPattern(CVC), 'no cvc');
    t.notOk(out.includes(USE_KEY) || out.includes(NO_USE_KEY), 'no API key');
    t.notOk(out.includes('order-77'), 'no token value');
  });
});

t.test('https destination: the system store, plus a per-destination CA file', { skip: opensslSkip() }, async (t) => {
  const ca = makeTestCa(t);
  const received: Received[] = [];
  const server = createHttpsServer({ key: ca.key, cert: ca.cert }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const port = (server.address() as AddressInfo).port;
  const s = await startTestService(t, {
    config: outboundConfig([{ origin: `https://localhost:${port}`, tls: { ca_file: ca.caFile } }, `https://127.0.0.1:${port}`]),
  });
  const created = await call(s.url, 'POST', '/tokens', { body: { type: 'card', data: { number: CARD, expiration_month: 7, expiration_year: 2031 } } });
  const body = { card: `{{ token: ${created.body.id} | json: '$.data.number' }}` };
  const ok = await call(s.url, 'POST', '/proxy/pay', { key: USE_KEY, body, headers: { 'svc-proxy-url': `https://localhost:${port}` } });
  t.equal(ok.status, 200, ok.text);
  t.equal(ok.text, 'ok');
  t.equal(received.length, 1);
  t.same(JSON.parse(received[0]!.body.toString()), { card: CARD });
  t.equal(received[0]!.headers.host, `localhost:${port}`, 'Host is the name, though the socket went to the checked address');
  // The same server without the CA file: its certificate is not trusted by the system store.
  const untrusted = await call(s.url, 'POST', '/proxy/pay', { key: USE_KEY, body, headers: { 'svc-proxy-url': `https://127.0.0.1:${port}` } });
  assertProxyError(t, untrusted, 502, 'destination_unreachable');
  t.equal(received.length, 1, 'nothing sent over an untrusted connection');
  t.notMatch(untrusted.text + s.logs(), cardPattern(CARD));
});

t.test('the detokenize transform of a pre-configured proxy', async (t) => {
  const up = await startUpstream(t);
  const proxy = (over: object = {}) => ({
    id: 'pay', name: 'pay', key: PROXY_KEY, destination_url: `${up.url}/base`, require_auth: true,
    request_transforms: [{ type: 'detokenize' }], ...over,
  });
  const s = await startTestService(t, { config: outboundConfig([], [proxy()]) });
  const created = await call(s.url, 'POST', '/tokens', { body: { type: 'card', data: { number: CARD, expiration_month: 7, expiration_year: 2031 } } });
  const expr = `{{ token: ${created.body.id} | json: '$.data.number' }}`;
  const r = await call(s.url, 'POST', `/proxy/charge?c=${encodeURIComponent(expr)}`, { key: USE_KEY, body: { card: expr }, headers: { 'svc-proxy-key': PROXY_KEY, 'x-card': expr } });
  t.equal(r.status, 200, r.text);
  const got = up.received.at(-1)!;
  t.same(JSON.parse(got.body.toString()), { card: CARD });
  t.equal(got.url, `/base/charge?c=${CARD}`);
  t.equal(got.headers['x-card'], CARD);
  t.notMatch(s.logs(), cardPattern(CARD), 'the leak guard (log mode) does not report the card the transform put in, nor log it');
  t.notMatch(s.logs(), /leak guard/, 'no leak-guard finding for the card the transform put in');
  const events = (await s.svc.store.audit.auditRange(TENANT_A, null, 100)).items.filter((e) => e?.request_id === r.headers.get('svc-trace-id'));
  t.match(events, [{ action: 'proxy.detokenize', destination: up.url, token_ids: [created.body.id] }], 'one audit event, action proxy.detokenize');

  const before = up.received.length;
  const denied = await call(s.url, 'POST', '/proxy/charge', { key: NO_USE_KEY, body: { card: expr }, headers: { 'svc-proxy-key': PROXY_KEY } });
  assertProxyError(t, denied, 403, 'forbidden', 'the detokenize transform with a key without token:use'); // issue 30: the code too
  t.equal(up.received.length, before, 'without token:use nothing is sent');
  t.notMatch(denied.text + s.logs(), cardPattern(CARD));

  const refused = (p: object): string[] => {
    try {
      buildModel(outboundConfig([], [p]), { env: {} });
    } catch (err) {
      if (err instanceof ConfigError) return err.problems;
      throw err;
    }
    return [];
  };
  t.match(refused(proxy({ require_auth: false })).join('\n'), /request_transforms\[0\]: a detokenize transform needs require_auth: true/);
  t.match(
    refused(proxy({ request_transforms: [{ type: 'detokenize' }, { type: 'tokenize', fields: [{ pointer: '/card', token: { type: 'card' } }] }] })).join('\n'),
    /detokenize must be the last request transform/,
  );
  t.same(refused(proxy()), [], 'with require_auth and last: accepted');
});

t.test('the proxy-endpoint rate limit counts outbound requests by API key', async (t) => {
  const up = await startUpstream(t);
  const cfg = outboundConfig([up.url]);
  cfg.rate_limits = { enabled: true, store: 'memory' };
  cfg.tenants[0].custom_rate_limits = { proxy_endpoint: { points: 2, duration_seconds: 60 } };
  const s = await startTestService(t, { config: cfg });
  const send = (key: string) => call(s.url, 'POST', '/proxy', { key, body: { a: 1 }, headers: { 'svc-proxy-url': up.url } });
  t.equal((await send(USE_KEY)).status, 200);
  const second = await send(USE_KEY);
  t.equal(second.status, 200);
  t.equal(second.headers.get('ratelimit-limit'), '2', 'the proxy-endpoint row is the strictest that applies');
  const third = await send(USE_KEY);
  assertProxyError(t, third, 429, 'rate_limited');
  t.equal((await send(NO_USE_KEY)).status, 200, 'another key has its own counter');
  t.equal(up.received.length, 3, 'the refused request sent nothing');
});

t.test("the server process's stdout/stderr carry no card, cvc, token value or key", async (t) => {
  const up = await startUpstream(t);
  const dir = mkdtempSync(join(tmpdir(), 'tp-outbound-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // debug: the most the service ever writes.
  const cfg = { ...outboundConfig([up.url]), log: { level: 'debug' }, store: { kind: 'embedded', path: join(dir, 'tokens.db') } };
  const child = await startChild(writeConfig(dir, cfg), { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') });
  t.teardown(() => child.kill9());
  const created = await call(child.url, 'POST', '/tokens', { body: { type: 'card', data: { number: CARD, expiration_month: 7, expiration_year: 2031, cvc: CVC } } });
  t.equal(created.status, 201);
  const body = { card: `{{ token: ${created.body.id} | json: '$.data.number' }}`, cvc: `{{ ${created.body.id} | json: '$.cvc' }}` };
  const proxied = (key: string, url: string) => call(child.url, 'POST', '/proxy/x', { key, body, headers: { 'svc-proxy-url': url } });
  const answers = [
    await proxied(USE_KEY, up.url), // sent
    await proxied(NO_USE_KEY, up.url), // 403 forbidden
    await proxied(USE_KEY, `http://localhost:${up.port}`), // 403 not allowed
    await proxied(USE_KEY, 'http://169.254.169.254/'), // 403 not allowed
  ];
  t.same(answers.map((a) => a.status), [200, 403, 403, 403]);
  t.same(JSON.parse(up.received[0]!.body.toString()), { card: CARD, cvc: CVC }, 'the use went through');
  t.equal(up.received.length, 1, 'the refusals sent nothing');
  await child.stop();
  const out = child.output() + answers.slice(1).map((a) => a.text).join('');
  t.ok(out.includes('"route":"/proxy/*"'), 'the access lines were captured');
  t.notMatch(out, cardPattern(CARD), 'no card number');
  t.notMatch(out, cvcPattern(CVC), 'no cvc');
  for (const secret of [USE_KEY, NO_USE_KEY]) t.notOk(out.includes(secret), 'no API key');
});
