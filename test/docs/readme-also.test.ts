/**
 * Issue 30, "Also": README promises no test exercised, each through the real service on port 0
 * (and a real upstream for the proxy transforms):
 * - README "OpenAPI": `GET /openapi.json` "needs no key and is never rate limited";
 * - README "Metrics": `metrics.host`, default `server.host`, "the address of that listener";
 * - README "Inbound proxy", response transforms: "`append_json` on a body that is not a JSON
 *   object or array is skipped with a warning in the log", and `mask`'s "`character` default `X`";
 * - README "Idempotent retries": "the replay carries `SVC-IDEMPOTENT-REPLAYED: true` and the
 *   retry's own `SVC-Trace-Id` and rate-limit headers".
 */
import { request } from 'node:http';
import t from 'tap';
import { baseConfig, call, KEYS, startTestService } from '../helpers/service.js';
import { configWithProxies, PROXY_KEY } from '../helpers/proxy.js';
import { startUpstream } from '../helpers/upstream.js';
import { waitFor } from '../helpers/wait.js';

/** Tenant A's private key may make 2 requests in 10 minutes; tenant B may create 5 tokens in 10 minutes. */
function limitedConfig(): Record<string, any> {
  const cfg = baseConfig() as Record<string, any>;
  cfg.rate_limits = { enabled: true };
  cfg.tenants[0].custom_rate_limits = { private_key: { points: 2, duration_seconds: 600 } };
  cfg.tenants[1].custom_rate_limits = { creating_tokens: { points: 5, duration_seconds: 600 } };
  return cfg;
}

const RATE_HEADERS = ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset', 'retry-after'];

t.test('GET /openapi.json is never rate limited, with or without a key whose limit is spent', async (t) => {
  const s = await startTestService(t, { config: limitedConfig() });
  const first = await s.call('GET', '/tokens');
  t.equal(first.status, 200, first.text.slice(0, 200));
  t.equal(first.headers.get('ratelimit-limit'), '2', 'limits are on for this key');
  await s.call('GET', '/tokens');
  const spent = await s.call('GET', '/tokens');
  t.equal(spent.status, 429, 'the key has spent its limit');
  t.equal(spent.body?.code, 'rate_limited');
  for (let i = 0; i < 5; i++) {
    const withKey = await s.call('GET', '/openapi.json');
    t.equal(withKey.status, 200, `with the spent key, request ${i}`);
    t.equal(withKey.body?.openapi, '3.1.0');
    const anonymous = await s.call('GET', '/openapi.json', { key: null });
    t.equal(anonymous.status, 200, `without a key, request ${i}`);
    for (const h of RATE_HEADERS) {
      t.equal(withKey.headers.get(h), null, `no ${h} (with the key)`);
      t.equal(anonymous.headers.get(h), null, `no ${h} (without a key)`);
    }
  }
  t.equal((await s.call('GET', '/tokens')).status, 429, 'the key is still limited elsewhere');
});

t.test('a replayed idempotent answer carries its own trace id and rate-limit headers', async (t) => {
  const s = await startTestService(t, { config: limitedConfig() });
  const send = () =>
    s.call('POST', '/tokens', { key: KEYS.tenantB, body: { type: 'token', data: 'order-1' }, headers: { 'svc-idempotency-key': 'promises2-replay-1' } });
  const first = await send();
  t.equal(first.status, 201, first.text.slice(0, 200));
  t.equal(first.headers.get('svc-idempotent-replayed'), null);
  t.equal(first.headers.get('ratelimit-limit'), '5', 'creating_tokens is the strictest rule');
  t.equal(first.headers.get('ratelimit-remaining'), '4');
  const again = await send();
  t.equal(again.status, 201, again.text.slice(0, 200));
  t.equal(again.headers.get('svc-idempotent-replayed'), 'true');
  t.same(again.body, first.body, 'the stored answer');
  t.equal(again.headers.get('ratelimit-limit'), '5');
  t.equal(again.headers.get('ratelimit-remaining'), '3', "the retry's own count, not the stored answer's 4");
  t.ok(Number(again.headers.get('ratelimit-reset')) >= 1, 'with its own reset');
  t.ok(again.headers.get('svc-trace-id'), 'a trace id');
  t.not(again.headers.get('svc-trace-id'), first.headers.get('svc-trace-id'), "the retry's own trace id");
});

/** GET on a fresh connection to host:port; resolves with the status, or rejects with the socket error. */
function getStatus(host: string, port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host, port, path, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

t.test('metrics.host is the address of the metrics listener; its default is server.host', async (t) => {
  const own = baseConfig() as Record<string, any>;
  own.metrics = { port: 0, host: '127.0.0.2' };
  const s = await startTestService(t, { config: own });
  t.match(s.url, /^http:\/\/127\.0\.0\.1:/, 'the service listens on server.host');
  const url = new URL(s.svc.metricsUrl ?? 'http://missing');
  t.equal(url.hostname, '127.0.0.2', 'the metrics listener is on metrics.host');
  t.equal(await getStatus('127.0.0.2', Number(url.port), '/metrics'), 200, '/metrics answers there');
  await t.rejects(getStatus('127.0.0.1', Number(url.port), '/metrics'), { code: 'ECONNREFUSED' }, 'not on server.host at that port');
  t.equal((await call(s.url, 'GET', '/metrics', { key: null })).status, 404, 'nor on the service port');

  const byDefault = baseConfig() as Record<string, any>;
  byDefault.server = { ...byDefault.server, host: '127.0.0.3' };
  byDefault.metrics = { port: 0 };
  const d = await startTestService(t, { config: byDefault });
  const durl = new URL(d.svc.metricsUrl ?? 'http://missing');
  t.equal(durl.hostname, '127.0.0.3', 'without metrics.host: server.host');
  t.equal(await getStatus('127.0.0.3', Number(durl.port), '/metrics'), 200);
});

t.test('response transforms: mask writes X by default; append_json skips a body that is not a JSON object or array, with a warning', async (t) => {
  const up = await startUpstream(t);
  up.respond((r, res) => {
    const [type, body] =
      r.url === '/text' ? ['text/plain', 'ref=12345 ok']
        : r.url === '/string' ? ['application/json', '"ref=12345"']
          : r.url === '/number' ? ['application/json', '42']
            : ['application/json', '{"note":"ref=12345"}'];
    res.writeHead(200, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  const cfg = configWithProxies([
    {
      id: 'resp', name: 'resp', key: PROXY_KEY, require_auth: false, destination_url: up.url,
      response_transforms: [
        { type: 'mask', pattern: 'ref=(\\d+)' },
        { type: 'append_json', location: '/added', value: 'yes' },
      ],
    },
  ]);
  const s = await startTestService(t, { config: cfg });
  const skipped = () => s.logs().split('\n').filter((l) => l.includes('append_json skipped')).length;
  const get = (path: string) => call(s.url, 'GET', `/proxy${path}`, { key: null, headers: { 'svc-proxy-key': PROXY_KEY } });

  const json = await get('/object');
  t.equal(json.status, 200, json.text);
  t.same(json.body, { note: 'ref=XXXXX', added: 'yes' }, 'an object: masked with X (the default) and appended to');
  t.equal(skipped(), 0, 'no warning for an object');

  const cases: Array<[string, string]> = [
    ['/text', 'ref=XXXXX ok'],
    ['/string', '"ref=XXXXX"'],
    ['/number', '42'],
  ];
  for (const [path, expected] of cases) {
    const before = skipped();
    const r = await get(path);
    t.equal(r.status, 200, `${path}: ${r.text}`);
    t.equal(r.text, expected, `${path}: masked, nothing appended`);
    t.equal(r.headers.get('content-length'), String(Buffer.byteLength(expected)), `${path}: its length recomputed`);
    await waitFor(() => skipped() === before + 1, { what: `the append_json warning for ${path}` });
    const line = JSON.parse(s.logs().split('\n').filter((l) => l.includes('append_json skipped')).at(-1)!) as { level: number | string };
    t.ok(line.level === 40 || line.level === 'warn', `${path}: logged as a warning`);
  }
});
