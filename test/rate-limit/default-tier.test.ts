/**
 * Spec, "Rate limits (default)", through HTTP: every row's default points show in the
 * RateLimit-Limit header of a first response, and every row is driven to its 429 (custom windows
 * short enough for a test) and through its mitigation (Throttle recovers after the window; Block
 * stays blocked past the window for its duration, then recovers).
 *
 * Each subtest has a tenant of its own, so counters never cross; subtests run in parallel.
 */
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { TIERS, RULES } from '../../src/rate-limit/rules.js';
import { startTestService } from '../helpers/service.js';
import { client, driveRow, expect429, expectAllowed, limitedConfig, oneToken, tenant } from './http-helpers.js';

const WINDOW = 1;
const BLOCK = 3;

// Default values, read from headers.
const dTest = tenant({ test: true, apps: [{ kind: 'private' }, { kind: 'management' }] });
const dMgmt = tenant({ apps: [{ kind: 'management' }] });
const dPublic = tenant({ apps: [{ kind: 'public' }] });
const dPrivate = tenant({ apps: [{ kind: 'private' }] });
const ePrivate = tenant({ apps: [{ kind: 'private' }] });
// Exhausted with custom overrides (mitigation inherited from the tier unless stated).
const xTest = tenant({ test: true, custom: { test_tenant: { points: 3, duration_seconds: WINDOW } }, apps: [{ kind: 'private' }] });
const xMgmt = tenant({ custom: { management_key: { points: 3, duration_seconds: WINDOW, block_seconds: BLOCK } }, apps: [{ kind: 'management' }] });
const xPublic = tenant({ custom: { public_key: { points: 3, duration_seconds: WINDOW, block_seconds: BLOCK } }, apps: [{ kind: 'public' }] });
const xPrivate = tenant({ custom: { private_key: { points: 3, duration_seconds: WINDOW } }, apps: [{ kind: 'private' }] });
const xListing = tenant({ custom: { listing_tokens: { points: 4, duration_seconds: WINDOW } }, apps: [{ kind: 'private' }] });
const xCreating = tenant({ custom: { creating_tokens: { points: 4, duration_seconds: WINDOW } }, apps: [{ kind: 'private' }] });
// The spec's own (unchanged) values exhausted, where that is cheap.
const rTest = tenant({ test: true, apps: [{ kind: 'private' }] });
const rPublic = tenant({ apps: [{ kind: 'public' }] });

const s = await startTestService(t, {
  config: limitedConfig([dTest, dMgmt, dPublic, dPrivate, ePrivate, xTest, xMgmt, xPublic, xPrivate, xListing, xCreating, rTest, rPublic]),
});
t.jobs = 8;

const missing = () => `/tokens/${randomUUID()}`;

t.test('default points of each row, as the RateLimit-Limit of a first response', async (t) => {
  const c = client(t, s.url);
  // Test tenant (50 / 10 s) is stricter than the private (1000) and management (200) rules it meets.
  expectAllowed(t, await c.send('GET', missing(), { key: dTest.keys[0][0] }), 404, 50, 49, 'test tenant, private key:');
  expectAllowed(t, await c.send('GET', '/applications', { key: dTest.keys[1][0] }), 200, 50, 49, 'test tenant, management key:');
  expectAllowed(t, await c.send('GET', '/applications', { key: dMgmt.keys[0][0] }), 200, 200, 199, 'management key:');
  const reset = Number((await c.send('GET', '/proxies', { key: dMgmt.keys[0][0] })).headers['ratelimit-reset']);
  t.ok(reset > 10 && reset <= 60, `management window is 60 s (reset in ${reset} s)`);
  // Public (50) is stricter than creating tokens (200) on /tokenize.
  expectAllowed(t, await c.send('POST', '/tokenize', { key: dPublic.keys[0][0], body: oneToken() }), 200, 50, 49, 'public key:');
  expectAllowed(t, await c.send('GET', missing(), { key: dPrivate.keys[0][0] }), 404, 1000, 999, 'private key:');
  // Listing (200) and creating (200) are stricter than private (1000) on their routes.
  expectAllowed(t, await c.send('GET', '/tokens', { key: dPrivate.keys[0][0] }), 200, 200, 199, 'listing tokens, GET /tokens:');
  expectAllowed(t, await c.send('GET', '/tokens/search?query=data:x', { key: dPrivate.keys[0][0] }), 200, 200, 198, 'listing tokens, GET /tokens/search:');
  expectAllowed(t, await c.send('POST', '/tokenize', { key: dPrivate.keys[0][0], body: oneToken() }), 200, 200, 199, 'creating tokens, POST /tokenize:');
  expectAllowed(t, await c.send('POST', '/tokens', { key: dPrivate.keys[0][0], body: oneToken() }), 201, 200, 198, 'creating tokens, POST /tokens:');
  // POST /tokens/search is not "listing tokens": only the private rule counts it.
  expectAllowed(t, await c.send('POST', '/tokens/search', { key: dPrivate.keys[0][0], body: { query: 'data:x' } }), 200, 1000, undefined, 'POST /tokens/search:');
});

t.test('RateLimit-* on every response of a limited route (errors too), none on the health check', async (t) => {
  const c = client(t, s.url);
  const bad = await c.send('POST', '/tokenize', { key: ePrivate.keys[0][0], raw: '{not json' });
  t.equal(bad.status, 400);
  t.equal(bad.headers['ratelimit-limit'], '200', 'a 400 carries the RateLimit-* headers');
  const forbidden = await c.send('GET', '/applications', { key: ePrivate.keys[0][0] });
  t.equal(forbidden.status, 403, 'a private key on a management route');
  t.notOk(forbidden.headers['ratelimit-limit'], 'refused before the rate-limit stage: not counted');
  for (const path of ['/healthz', '/readyz']) {
    const health = await c.send('GET', path);
    t.equal(health.status, 200, path);
    t.notOk(health.headers['ratelimit-limit'], `${path} is not limited`);
  }
});

t.test('test tenant: 50 / 10 s, Throttle (the spec value, exhausted)', async (t) => {
  const c = client(t, s.url);
  for (let i = 1; i <= 50; i++) {
    const r = await c.send('GET', missing(), { key: rTest.keys[0][0] });
    if (r.status !== 404) t.fail(`request ${i}: ${r.status}`);
  }
  const r = await c.send('GET', missing(), { key: rTest.keys[0][0] });
  expect429(t, r, 50, 'request 51:');
  t.ok(Number(r.headers['retry-after']) <= 10, 'throttle: Retry-After within the 10 s window');
});

t.test('test tenant row: N allowed, N+1 429, Throttle recovers after the window', async (t) => {
  const c = client(t, s.url);
  await driveRow(t, {
    send: () => c.send('GET', missing(), { key: xTest.keys[0][0] }),
    okStatus: 404, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'throttle' },
  });
});

t.test('management API key row: Block outlasts the window, then recovers', async (t) => {
  const c = client(t, s.url);
  const paths = ['/applications', '/proxies', '/reactors'];
  let i = 0;
  await driveRow(t, {
    send: () => c.send('GET', paths[i++ % 3], { key: xMgmt.keys[0][0] }),
    okStatus: 200, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'block', blockSeconds: BLOCK },
  });
});

t.test('public API key: 50 / 10 s, Block 10 s (the spec value, exhausted)', async (t) => {
  const c = client(t, s.url);
  for (let i = 1; i <= 50; i++) {
    const r = await c.send('POST', '/tokenize', { key: rPublic.keys[0][0], body: oneToken() });
    if (r.status !== 200) t.fail(`request ${i}: ${r.status}`);
  }
  const r = await c.send('POST', '/tokenize', { key: rPublic.keys[0][0], body: oneToken() });
  expect429(t, r, 50, 'request 51:');
  t.equal(r.headers['retry-after'], '10', 'blocked for 10 s');
});

t.test('public API key row: Block outlasts the window, then recovers', async (t) => {
  const c = client(t, s.url);
  await driveRow(t, {
    send: () => c.send('POST', '/tokenize', { key: xPublic.keys[0][0], body: oneToken() }),
    okStatus: 200, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'block', blockSeconds: BLOCK },
  });
});

t.test('private API key row: Throttle', async (t) => {
  const c = client(t, s.url);
  await driveRow(t, {
    send: () => c.send('GET', missing(), { key: xPrivate.keys[0][0] }),
    okStatus: 404, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'throttle' },
  });
});

t.test('listing tokens row: GET /tokens and GET /tokens/search share one counter', async (t) => {
  const c = client(t, s.url);
  const paths = ['/tokens', '/tokens/search?query=data:x', '/v2/tokens', '/v2/tokens/search?query=data:x'];
  let i = 0;
  await driveRow(t, {
    send: () => c.send('GET', paths[i++ % paths.length], { key: xListing.keys[0][0] }),
    okStatus: 200, points: 4, durationSeconds: WINDOW, mitigation: { kind: 'throttle' },
  });
});

t.test('creating tokens row: POST /tokens and POST /tokenize share one counter', async (t) => {
  const c = client(t, s.url);
  let i = 0;
  await driveRow(t, {
    send: () => {
      const post = i++ % 2 === 0;
      return c.send('POST', post ? '/tokens' : '/tokenize', { key: xCreating.keys[0][0], body: oneToken() }).then((r) =>
        // POST /tokens answers 201, POST /tokenize 200: compare as "admitted".
        r.status === 201 ? { ...r, status: 200 } : r,
      );
    },
    okStatus: 200, points: 4, durationSeconds: WINDOW, mitigation: { kind: 'throttle' },
  });
});

// The proxy endpoint rows of both tiers are driven through /proxy/* in proxy-endpoint.test.ts.

t.test('proxy endpoint row, as data: 500 / 10 s Throttle by SVC-PROXY-KEY on the proxy routes only', async (t) => {
  t.same(TIERS.default.proxy_endpoint, { points: 500, durationSeconds: 10, mitigation: { kind: 'throttle' } });
  t.same(TIERS.higher.proxy_endpoint, { points: 1000, durationSeconds: 10, mitigation: { kind: 'throttle' } });
  const def = RULES.find((r) => r.name === 'proxy_endpoint');
  t.match(def, { counter: 'proxy_key', match: { routes: ['proxy'] } });
  t.same(def?.match.routes, ['proxy']);
});
