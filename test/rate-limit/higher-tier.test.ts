/**
 * Spec, "Rate limits (higher tier)", through HTTP, for tenants with `rate_limit_tier: higher`:
 * every row's points show in the RateLimit-Limit of a first response (the test tenant row keeps the
 * default tier's 50 / 10 s, the spec gives it no values), and every row is driven to its 429 with
 * custom overrides layered over the higher tier (points and window only: the mitigation and, where
 * not overridden, the block duration come from the tier).
 */
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { TIERS } from '../../src/rate-limit/rules.js';
import { startTestService } from '../helpers/service.js';
import { client, driveRow, expect429, expectAllowed, limitedConfig, oneToken, tenant } from './http-helpers.js';

const WINDOW = 1;
const BLOCK = 3;
const higher = 'higher' as const;

const dTest = tenant({ tier: higher, test: true, apps: [{ kind: 'private' }] });
const dMgmt = tenant({ tier: higher, apps: [{ kind: 'management' }] });
const dPublic = tenant({ tier: higher, apps: [{ kind: 'public' }] });
const dPrivate = tenant({ tier: higher, apps: [{ kind: 'private' }] });
const xTest = tenant({ tier: higher, test: true, custom: { test_tenant: { points: 3, duration_seconds: WINDOW } }, apps: [{ kind: 'private' }] });
const xMgmt = tenant({ tier: higher, custom: { management_key: { points: 3, duration_seconds: WINDOW, block_seconds: BLOCK } }, apps: [{ kind: 'management' }] });
const xPublic = tenant({ tier: higher, custom: { public_key: { points: 3, duration_seconds: WINDOW, block_seconds: BLOCK } }, apps: [{ kind: 'public' }] });
const xPrivate = tenant({ tier: higher, custom: { private_key: { points: 3, duration_seconds: WINDOW } }, apps: [{ kind: 'private' }] });
const xListing = tenant({ tier: higher, custom: { listing_tokens: { points: 4, duration_seconds: WINDOW } }, apps: [{ kind: 'private' }] });
const xCreating = tenant({ tier: higher, custom: { creating_tokens: { points: 4, duration_seconds: WINDOW } }, apps: [{ kind: 'private' }] });
// The tier's own values, exhausted: the test tenant (kept at 50) and the public key (100, Block 10 s).
const rTest = tenant({ tier: higher, test: true, apps: [{ kind: 'private' }] });
const rPublic = tenant({ tier: higher, apps: [{ kind: 'public' }] });
// A custom override may change the mitigation too: the private rule as a Block rule.
const xBlockPrivate = tenant({
  tier: higher,
  custom: { private_key: { points: 2, duration_seconds: WINDOW, mitigation: 'block', block_seconds: BLOCK } },
  apps: [{ kind: 'private' }],
});

const s = await startTestService(t, {
  config: limitedConfig([dTest, dMgmt, dPublic, dPrivate, xTest, xMgmt, xPublic, xPrivate, xListing, xCreating, rTest, rPublic, xBlockPrivate]),
});
t.jobs = 8;

const missing = () => `/tokens/${randomUUID()}`;

t.test('higher-tier points of each row, as the RateLimit-Limit of a first response', async (t) => {
  const c = client(t, s.url);
  expectAllowed(t, await c.send('GET', missing(), { key: dTest.keys[0][0] }), 404, 50, 49, 'test tenant (default values kept):');
  expectAllowed(t, await c.send('GET', '/applications', { key: dMgmt.keys[0][0] }), 200, 400, 399, 'management key:');
  expectAllowed(t, await c.send('POST', '/tokenize', { key: dPublic.keys[0][0], body: oneToken() }), 200, 100, 99, 'public key:');
  expectAllowed(t, await c.send('GET', missing(), { key: dPrivate.keys[0][0] }), 404, 2000, 1999, 'private key:');
  expectAllowed(t, await c.send('GET', '/tokens', { key: dPrivate.keys[0][0] }), 200, 400, 399, 'listing tokens:');
  expectAllowed(t, await c.send('POST', '/tokens', { key: dPrivate.keys[0][0], body: oneToken() }), 201, 400, 399, 'creating tokens:');
});

t.test('higher tier, test tenant row: the default 50 / 10 s Throttle, exhausted', async (t) => {
  t.same(TIERS.higher.test_tenant, TIERS.default.test_tenant, 'data: the higher tier keeps the default values');
  const c = client(t, s.url);
  for (let i = 1; i <= 50; i++) {
    const r = await c.send('GET', missing(), { key: rTest.keys[0][0] });
    if (r.status !== 404) t.fail(`request ${i}: ${r.status}`);
  }
  expect429(t, await c.send('GET', missing(), { key: rTest.keys[0][0] }), 50, 'request 51:');
});

t.test('higher tier, public key: 100 / 10 s, Block 10 s, exhausted', async (t) => {
  const c = client(t, s.url);
  for (let i = 1; i <= 100; i++) {
    const r = await c.send('POST', '/tokenize', { key: rPublic.keys[0][0], body: oneToken() });
    if (r.status !== 200) t.fail(`request ${i}: ${r.status}`);
  }
  const r = await c.send('POST', '/tokenize', { key: rPublic.keys[0][0], body: oneToken() });
  expect429(t, r, 100, 'request 101:');
  t.equal(r.headers['retry-after'], '10', 'blocked for 10 s');
});

t.test('higher tier, test tenant row with custom points: Throttle', async (t) => {
  const c = client(t, s.url);
  await driveRow(t, { send: () => c.send('GET', missing(), { key: xTest.keys[0][0] }), okStatus: 404, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'throttle' } });
});

t.test('higher tier, management row with custom points: Block (from the tier) outlasts the window', async (t) => {
  const c = client(t, s.url);
  await driveRow(t, { send: () => c.send('GET', '/reactors', { key: xMgmt.keys[0][0] }), okStatus: 200, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'block', blockSeconds: BLOCK } });
});

t.test('higher tier, public row with custom points: Block (from the tier) outlasts the window', async (t) => {
  const c = client(t, s.url);
  await driveRow(t, {
    send: () => c.send('POST', '/tokenize', { key: xPublic.keys[0][0], body: oneToken() }),
    okStatus: 200, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'block', blockSeconds: BLOCK },
  });
});

t.test('higher tier, private row with custom points: Throttle', async (t) => {
  const c = client(t, s.url);
  await driveRow(t, { send: () => c.send('GET', missing(), { key: xPrivate.keys[0][0] }), okStatus: 404, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'throttle' } });
});

t.test('higher tier, listing row with custom points: Throttle', async (t) => {
  const c = client(t, s.url);
  let i = 0;
  await driveRow(t, {
    send: () => c.send('GET', i++ % 2 ? '/tokens' : '/tokens/search?query=data:x', { key: xListing.keys[0][0] }),
    okStatus: 200, points: 4, durationSeconds: WINDOW, mitigation: { kind: 'throttle' },
  });
});

t.test('higher tier, creating row with custom points: Throttle', async (t) => {
  const c = client(t, s.url);
  await driveRow(t, {
    send: () => c.send('POST', '/tokenize', { key: xCreating.keys[0][0], body: [oneToken(), oneToken()] }),
    okStatus: 200, points: 4, durationSeconds: WINDOW, mitigation: { kind: 'throttle' },
  });
});

t.test('a custom override turns the private Throttle rule into a Block rule', async (t) => {
  const c = client(t, s.url);
  await driveRow(t, { send: () => c.send('GET', missing(), { key: xBlockPrivate.keys[0][0] }), okStatus: 404, points: 2, durationSeconds: WINDOW, mitigation: { kind: 'block', blockSeconds: BLOCK } });
});

// The higher tier's proxy endpoint row is driven through /proxy/* in proxy-endpoint.test.ts.
