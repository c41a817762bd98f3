/**
 * GET /metrics (README "Metrics") over real HTTP: the output is valid Prometheus text; each family
 * appears and moves when its event happens (a tokenization, a reveal, a 429, a proxied request, a
 * leak-guard finding, a destination failure, store writes; reactors in reactors.test.ts); the
 * bearer token and the separate port; several services in one process keep their own registries;
 * and no secret, token id or raw path ever appears in the output.
 */
import t from 'tap';
import { createHash } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { endlessResponder } from '../helpers/endless.js';
import { PROXY_KEY, PROXY_KEY_2 } from '../helpers/proxy.js';
import { cardPattern, cvcPattern, randomCard, randomCvc } from '../helpers/secrets.js';
import { baseConfig, KEYS, startTestService, TENANT_A } from '../helpers/service.js';
import { defaultResponder, startUpstream } from '../helpers/upstream.js';
import { startEchoUpstream } from '../helpers/upgrade-upstream.js';
import { waitFor } from '../helpers/wait.js';
import { parseExposition } from './exposition.js';
import { scrape } from './scrape.js';

const METRICS_TOKEN = 'metrics_token_0123456789abcdef';

/** A port nothing listens on: bound, then released. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

t.test('the strict parser rejects what a scraper would', async (t) => {
  t.throws(() => parseExposition('x 1\n'), /undeclared family/);
  t.throws(() => parseExposition('# TYPE x counter\nx{a="b} 1\n'), /unterminated/);
  t.throws(() => parseExposition('# TYPE x counter\nx 1\nx 2\n'), /repeated/);
  t.throws(() => parseExposition('# TYPE x counter\nx one\n'), /bad value/);
  t.throws(() => parseExposition('# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_count 1\nh_sum 1\n'), /decrease/);
  t.throws(() => parseExposition('# TYPE h histogram\nh_bucket{le="1"} 1\nh_count 1\n'), /\+Inf/);
  t.equal(parseExposition('# HELP x a\n# TYPE x counter\nx{a="q\\"\\n"} 1\n').get('x')?.samples[0]?.labels.a, 'q"\n');
});

t.test('every family appears and moves when its event happens', async (t) => {
  const upstream = await startUpstream(t);
  const cfg = baseConfig() as Record<string, any>;
  cfg.rate_limits = { enabled: true };
  const tenantA = cfg.tenants[0];
  // One request per minute on listing, so the second GET /tokens is a 429 by that rule.
  tenantA.custom_rate_limits = { listing_tokens: { points: 1, duration_seconds: 60 } };
  tenantA.proxies = [
    { id: 'pay', name: 'pay', key: PROXY_KEY, destination_url: upstream.url, require_auth: false, leak_guard: 'log' },
    { id: 'gone', name: 'gone', key: PROXY_KEY_2, destination_url: `http://127.0.0.1:${await closedPort()}`, require_auth: false, timeout_ms: 2000 },
  ];
  const s = await startTestService(t, { config: cfg });
  const before = await scrape(s.url);
  for (const family of [
    'tokenproxy_http_request_duration_seconds', 'tokenproxy_rate_limited_total', 'tokenproxy_tokens_created_total',
    'tokenproxy_token_reveals_total', 'tokenproxy_proxy_destination_duration_seconds', 'tokenproxy_proxy_destination_errors_total',
    'tokenproxy_leak_guard_findings_total', 'tokenproxy_reactor_calls_total', 'tokenproxy_reactor_host_restarts_total',
    'tokenproxy_store_write_duration_seconds', 'tokenproxy_store_write_errors_total',
    // process defaults and the event-loop delay (prom-client's collectDefaultMetrics)
    'process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_seconds', 'nodejs_eventloop_lag_p99_seconds', 'nodejs_heap_size_used_bytes',
  ]) t.ok(before.families.has(family), `${family} is exposed`);
  t.equal(before.families.get('tokenproxy_http_request_duration_seconds')?.type, 'histogram');
  t.equal(before.families.get('tokenproxy_tokens_created_total')?.type, 'counter');
  // The key ring's first data key was a store write at start-up.
  t.equal(before.value('tokenproxy_store_write_duration_seconds_count', { store: 'embedded', operation: 'addDataKey' }), 1, 'the data key write at start-up was timed');

  t.test('a tokenization counts tokens created by type and a store write', async (t) => {
    const r = await s.call('POST', '/tokenize', { body: { a: { type: 'card', data: { number: randomCard(), expiration_month: 1, expiration_year: 2032 } }, b: 'plain-value', c: 'another' } });
    t.equal(r.status, 200);
    const m = await scrape(s.url);
    t.equal(m.value('tokenproxy_tokens_created_total', { type: 'card' }) - before.value('tokenproxy_tokens_created_total', { type: 'card' }), 1, 'one card token');
    t.equal(m.value('tokenproxy_tokens_created_total', { type: 'token' }) - before.value('tokenproxy_tokens_created_total', { type: 'token' }), 2, 'two plain tokens');
    t.equal(m.value('tokenproxy_store_write_duration_seconds_count', { store: 'embedded', operation: 'insertMany' }), 1, 'one batch write, timed');
    t.equal(m.value('tokenproxy_http_request_duration_seconds_count', { route: '/tokenize', method: 'POST', status: '200' }), 1, 'the request, by route pattern');
    t.equal(m.value('tokenproxy_store_write_errors_total'), 0, 'no store write failed');

    // A conflict (an id that exists) is the caller's 409, not a store failure; nothing is created.
    const id = '0f0f0f0f-0000-4000-8000-000000000001';
    t.equal((await s.call('POST', '/tokens', { body: { id, type: 'token', data: 'x' } })).status, 201);
    t.equal((await s.call('POST', '/tokens', { body: { id, type: 'token', data: 'y' } })).status, 409);
    const after = await scrape(s.url);
    t.equal(after.value('tokenproxy_tokens_created_total', { type: 'token' }) - m.value('tokenproxy_tokens_created_total', { type: 'token' }), 1);
    t.equal(after.value('tokenproxy_store_write_errors_total'), 0, 'a duplicate id is not a store failure');
  });

  t.test('a reveal read counts a reveal; the route label is the pattern', async (t) => {
    const created = await s.call('POST', '/tokens', { body: { type: 'token', data: 'reveal-me' } });
    const masked = await s.call('GET', `/tokens/${created.body.id}`, { key: KEYS.masked });
    t.equal(masked.status, 200);
    const m0 = await scrape(s.url);
    const revealed = await s.call('GET', `/tokens/${created.body.id}`);
    t.equal(revealed.body.data, 'reveal-me');
    const m = await scrape(s.url);
    t.equal(m.value('tokenproxy_token_reveals_total', { type: 'token' }) - m0.value('tokenproxy_token_reveals_total', { type: 'token' }), 1, 'one reveal (the masked read was none)');
    t.equal(m.value('tokenproxy_http_request_duration_seconds_count', { route: '/tokens/:id', method: 'GET', status: '200' }), 2);
    t.notOk(m.text.includes(created.body.id), 'no token id in the output');
    t.equal((await s.call('GET', '/no/such/route/123')).status, 404);
    const m2 = await scrape(s.url);
    t.equal(m2.value('tokenproxy_http_request_duration_seconds_count', { route: 'unmatched', status: '404' }), 1, 'an unmatched route has a fixed label');
    t.notOk(m2.text.includes('/no/such'), 'never the raw path');
    // A method no route serves: 405, labelled with a fixed method and route.
    t.equal((await s.call('PROPFIND', '/tokenize')).status, 405);
    const m3 = await scrape(s.url);
    t.equal(m3.value('tokenproxy_http_request_duration_seconds_count', { method: 'other', route: 'unmatched', status: '405' }), 1);
    t.notOk(m3.text.includes('PROPFIND'), 'not the method as sent');
  });

  t.test('a 429 counts by rule', async (t) => {
    t.equal((await s.call('GET', '/tokens')).status, 200);
    const limited = await s.call('GET', '/tokens');
    t.equal(limited.status, 429);
    const m = await scrape(s.url);
    t.equal(m.value('tokenproxy_rate_limited_total', { rule: 'listing_tokens' }), 1);
    t.equal(m.value('tokenproxy_rate_limited_total'), 1, 'no other rule');
    t.equal(m.value('tokenproxy_http_request_duration_seconds_count', { route: '/tokens', status: '429' }), 1);
    // /metrics itself is neither rate limited nor API-key authenticated.
    for (let i = 0; i < 3; i++) await scrape(s.url);
  });

  t.test('a proxied request records destination latency by proxy id; a leak finding and a failure count', async (t) => {
    const card = randomCard();
    const r = await fetch(`${s.url}/proxy/charge`, {
      method: 'POST',
      headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': 'application/json' },
      body: JSON.stringify({ number: card }),
    });
    await r.text();
    t.equal(r.status, 200);
    t.equal(upstream.received.length, 1);
    const gone = await fetch(`${s.url}/proxy/x`, { headers: { 'svc-proxy-key': PROXY_KEY_2 } });
    await gone.text();
    t.equal(gone.status, 502);
    // The leak guard counts when the request body has been read to its end.
    const m = await waitFor(async () => {
      const x = await scrape(s.url);
      return x.value('tokenproxy_leak_guard_findings_total') > 0 && x;
    }, { what: 'the leak finding' });
    t.equal(m.value('tokenproxy_proxy_destination_duration_seconds_count', { tenant: TENANT_A, proxy: 'pay' }), 1, 'latency by proxy id');
    t.equal(m.value('tokenproxy_leak_guard_findings_total', { tenant: TENANT_A, proxy: 'pay', action: 'forwarded' }), 1);
    t.equal(m.value('tokenproxy_proxy_destination_errors_total', { tenant: TENANT_A, proxy: 'gone', code: 'destination_unreachable' }), 1);
    t.equal(m.value('tokenproxy_proxy_destination_duration_seconds_count', { proxy: 'gone' }), 0, 'no answer, no latency');
    t.equal(m.value('tokenproxy_http_request_duration_seconds_count', { route: '/proxy/*', method: 'POST', status: '200' }), 1);
    t.notOk(cardPattern(card).test(m.text), 'the leaked card is not in the output');
    t.notOk(m.text.includes('/proxy/charge'), 'nor the raw proxy path');
  });

  t.test('a caller hanging up mid-response is client_closed, not a destination failure', async (t) => {
    upstream.respond(endlessResponder());
    t.teardown(() => upstream.respond(defaultResponder));
    const m0 = await scrape(s.url);
    const ac = new AbortController();
    const res = await fetch(`${s.url}/proxy/big`, { headers: { 'svc-proxy-key': PROXY_KEY }, signal: ac.signal });
    t.equal(res.status, 200);
    const reader = res.body!.getReader();
    await reader.read();
    ac.abort();
    await reader.read().catch(() => undefined);
    const m = await waitFor(async () => {
      const x = await scrape(s.url);
      return x.value('tokenproxy_proxy_destination_errors_total', { proxy: 'pay' }) > m0.value('tokenproxy_proxy_destination_errors_total', { proxy: 'pay' }) && x;
    }, { what: 'the abandoned forward counted' });
    t.equal(m.value('tokenproxy_proxy_destination_errors_total', { proxy: 'pay', code: 'client_closed' }), 1);
    t.equal(m.value('tokenproxy_proxy_destination_errors_total', { proxy: 'pay', code: 'destination_unreachable' }), 0, 'not blamed on the destination');
  });
});

t.test('no card number, cvc, token id, key or raw path with an id in the output', async (t) => {
  const cfg = baseConfig() as Record<string, any>;
  const upstream = await startUpstream(t);
  cfg.tenants[0].proxies = [{ id: 'scan', name: 'scan', key: PROXY_KEY, destination_url: upstream.url, require_auth: true }];
  const s = await startTestService(t, { config: cfg });
  const card = randomCard();
  const cvc = randomCvc();
  const r = await s.call('POST', '/tokenize', { body: { card: { type: 'card', data: { number: card, expiration_month: 3, expiration_year: 2031, cvc } } } });
  t.equal(r.status, 200);
  const id: string = r.body.card.id;
  const read = await s.call('GET', `/tokens/${id}`);
  t.equal(read.body.data.number, card, 'the card was revealed');
  t.equal((await s.call('GET', `/tokens/${id}?x=${card}`)).status, 200);
  const proxied = await fetch(`${s.url}/proxy/things/${id}?svc-proxy-key=${PROXY_KEY}`, { headers: { 'svc-api-key': KEYS.private } });
  await proxied.text();
  t.equal(proxied.status, 200);
  const m = await scrape(s.url);
  t.ok(m.value('tokenproxy_token_reveals_total', { type: 'card' }) >= 1, 'the reveal was counted');
  t.notOk(cardPattern(card).test(m.text), 'no card number');
  t.notOk(cvcPattern(cvc).test(m.text) || m.text.includes(`"${cvc}"`), 'no cvc');
  for (const [what, secret] of [['token id', id], ['API key', KEYS.private], ['proxy key', PROXY_KEY], ['raw path', `/tokens/${id}`], ['raw proxy path', '/proxy/things']] as const) {
    t.notOk(m.text.includes(secret), `no ${what}`);
  }
  // Every route label is a route pattern or "unmatched".
  const routes = new Set(m.families.get('tokenproxy_http_request_duration_seconds')!.samples.map((x) => x.labels.route));
  t.same([...routes].sort(), ['/proxy/*', '/tokenize', '/tokens/:id'], 'route patterns only');
});

t.test('protocol upgrades are counted under /proxy/* (101 when relayed), refusals too', async (t) => {
  const echo = await startEchoUpstream(t);
  const cfg = baseConfig() as Record<string, any>;
  cfg.tenants[0].proxies = [{ id: 'ws', name: 'ws', key: PROXY_KEY, destination_url: echo.url, require_auth: false }];
  const s = await startTestService(t, { config: cfg });
  const upgrade = (path: string, key: string) =>
    new Promise<number>((resolve, reject) => {
      const u = new URL(s.url);
      const req = httpRequest({ host: u.hostname, port: u.port, path, agent: false, headers: { connection: 'Upgrade', upgrade: 'websocket', 'svc-proxy-key': key } });
      req.on('upgrade', (res, socket) => {
        socket.destroy();
        resolve(res.statusCode ?? 0);
      });
      req.on('response', (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
  t.equal(await upgrade('/proxy/socket/123', PROXY_KEY), 101);
  t.equal(await upgrade('/proxy/socket/123', PROXY_KEY_2), 401, 'a wrong proxy key is refused');
  t.equal(await upgrade('/elsewhere', PROXY_KEY), 404);
  const m = await waitFor(async () => {
    const x = await scrape(s.url);
    const counted = x.value('tokenproxy_http_request_duration_seconds_count', { route: '/proxy/*' }) + x.value('tokenproxy_http_request_duration_seconds_count', { route: 'unmatched' });
    return counted >= 3 && x;
  }, { what: 'three upgrades counted' });
  t.equal(m.value('tokenproxy_http_request_duration_seconds_count', { route: '/proxy/*', method: 'GET', status: '101' }), 1);
  t.equal(m.value('tokenproxy_http_request_duration_seconds_count', { route: '/proxy/*', status: '401' }), 1);
  t.equal(m.value('tokenproxy_http_request_duration_seconds_count', { route: 'unmatched', status: '404' }), 1);
  t.notOk(m.text.includes('/proxy/socket') || m.text.includes('/elsewhere'), 'no raw path');
});

t.test('metrics.token: a bearer token is required, compared exactly', async (t) => {
  const cfg = baseConfig() as Record<string, any>;
  cfg.metrics = { token: METRICS_TOKEN };
  const s = await startTestService(t, { config: cfg });
  for (const [what, headers] of [
    ['no token', {}],
    ['a wrong token', { authorization: `Bearer ${METRICS_TOKEN.slice(0, -1)}x` }],
    ['a longer token', { authorization: `Bearer ${METRICS_TOKEN}x` }],
    ['another scheme', { authorization: `Basic ${METRICS_TOKEN}` }],
    ['an API key instead', { 'svc-api-key': KEYS.private }],
  ] as const) {
    const res = await fetch(`${s.url}/metrics`, { headers });
    const body = await res.json() as Record<string, unknown>;
    t.equal(res.status, 401, `${what}: 401`);
    t.equal(res.headers.get('content-type'), 'application/problem+json');
    t.equal(res.headers.get('www-authenticate'), 'Bearer realm="metrics"');
    t.match(body, { status: 401, code: 'metrics_unauthorized', type: 'urn:tokenproxy:problem:metrics_unauthorized', title: String, detail: String });
  }
  const m = await scrape(s.url, METRICS_TOKEN);
  t.ok(m.families.has('tokenproxy_http_request_duration_seconds'), 'the right token scrapes');
  t.equal(m.value('tokenproxy_http_request_duration_seconds_count', { route: '/metrics', status: '401' }), 5, 'refusals are counted too');
  t.notOk(m.text.includes(METRICS_TOKEN), 'the token is not in the output');
});

t.test('metrics.port: /metrics is served only on its own listener (token given as its sha256)', async (t) => {
  const cfg = baseConfig() as Record<string, any>;
  cfg.metrics = { port: 0, token: { sha256: createHash('sha256').update(METRICS_TOKEN).digest('hex') } };
  const s = await startTestService(t, { config: cfg });
  t.ok(s.svc.metricsUrl, 'the service reports the metrics listener');
  t.not(s.svc.metricsUrl, s.url);
  const main = await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  t.equal(main.status, 404, 'not on the main port');
  t.equal(((await main.json()) as { code: string }).code, 'route_not_found');
  t.equal((await s.call('POST', '/tokenize', { body: 'x' })).status, 200);
  const m = await scrape(s.svc.metricsUrl!, METRICS_TOKEN);
  t.equal(m.value('tokenproxy_tokens_created_total', { type: 'token' }), 1, 'the separate listener shows the service\'s metrics');
  const unauth = await fetch(`${s.svc.metricsUrl}/metrics`);
  t.equal(unauth.status, 401, 'the token applies there too');
  t.equal(((await unauth.json()) as { code: string }).code, 'metrics_unauthorized');
  const other = await fetch(`${s.svc.metricsUrl}/tokenize`, { method: 'POST', body: '"x"' });
  t.equal(other.status, 404, 'nothing else on the metrics port');
  t.equal(((await other.json()) as { code: string }).code, 'route_not_found');
  const post = await fetch(`${s.svc.metricsUrl}/metrics`, { method: 'POST' });
  t.equal(post.status, 405);
  t.equal(post.headers.get('allow'), 'GET');
});

t.test('several services in one process keep their own registries; metrics.enabled: false', async (t) => {
  const a = await startTestService(t);
  const b = await startTestService(t);
  t.equal((await a.call('POST', '/tokenize', { body: 'only-a' })).status, 200);
  t.equal((await scrape(a.url)).value('tokenproxy_tokens_created_total'), 1);
  t.equal((await scrape(b.url)).value('tokenproxy_tokens_created_total'), 0, 'b counted nothing of a');
  const cfg = baseConfig() as Record<string, any>;
  cfg.metrics = { enabled: false };
  const off = await startTestService(t, { config: cfg });
  const res = await fetch(`${off.url}/metrics`);
  t.equal(res.status, 404, 'disabled: no /metrics');
  await res.text();
  t.equal((await off.call('POST', '/tokenize', { body: 'still-works' })).status, 200);
});
