/**
 * The spec's "Proxy endpoint" rows (default tier: 500 / 10 s, higher tier: 1000 / 10 s, Throttle,
 * counted by SVC-PROXY-KEY) through HTTP on /proxy/*, with a real upstream: the default points in
 * the RateLimit-Limit of a first answer, each tier's row driven to its 429 with a custom window,
 * Throttle recovering, two proxy keys counting apart, the proxy key counting across client IPs,
 * and a 429 that never reaches the upstream. Tokenproxy's own errors on the proxy route are
 * wrapped as `{"proxy_error": …}`; sendViaProxy unwraps them after checking.
 */
import t from 'tap';
import { startTestService } from '../helpers/service.js';
import { startUpstream } from '../helpers/upstream.js';
import { addProxy, client, driveRow, expect429, expectAllowed, limitedConfig, reachLimit, sendViaProxy, tenant } from './http-helpers.js';

const WINDOW = 1;

const up = await startUpstream(t);

const dDefault = tenant({ apps: [{ kind: 'private', also: ['proxy:invoke'] }] });
const dDefaultKey = addProxy(dDefault, up.url);
const dAuthKey = addProxy(dDefault, up.url, { requireAuth: true });
const dHigher = tenant({ tier: 'higher', apps: [{ kind: 'private' }] });
const dHigherKey = addProxy(dHigher, up.url);
const xDefault = tenant({ custom: { proxy_endpoint: { points: 3, duration_seconds: WINDOW } }, apps: [{ kind: 'private' }] });
const xDefaultKeys = [addProxy(xDefault, up.url), addProxy(xDefault, up.url)];
const xHigher = tenant({ tier: 'higher', custom: { proxy_endpoint: { points: 4, duration_seconds: WINDOW } }, apps: [{ kind: 'private' }] });
const xHigherKey = addProxy(xHigher, up.url);
const xIps = tenant({ custom: { proxy_endpoint: { points: 2, duration_seconds: 10 } }, apps: [{ kind: 'private' }] });
const xIpsKey = addProxy(xIps, up.url);
const xQuiet = tenant({ custom: { proxy_endpoint: { points: 1, duration_seconds: 10 } }, apps: [{ kind: 'private' }] });
const xQuietKey = addProxy(xQuiet, up.url);

const s = await startTestService(t, { config: limitedConfig([dDefault, dHigher, xDefault, xHigher, xIps, xQuiet]) });
t.jobs = 4;

t.test('default points of the proxy rows, as the RateLimit-Limit of a first answer', async (t) => {
  const c = client(t, s.url);
  expectAllowed(t, await sendViaProxy(c, dDefaultKey), 200, 500, 499, 'default tier, proxy key alone:');
  expectAllowed(t, await sendViaProxy(c, dHigherKey), 200, 1000, 999, 'higher tier, proxy key alone:');
  // With require_auth the private key's rule (1000) counts too; the proxy rule (500) is stricter.
  expectAllowed(t, await sendViaProxy(c, dAuthKey, { key: dDefault.keys[0][0] }), 200, 500, 499, 'default tier, proxy key and private API key:');
});

t.test('default tier proxy row (custom window): N admitted, N+1 429, Throttle recovers', async (t) => {
  const c = client(t, s.url);
  await driveRow(t, { send: () => sendViaProxy(c, xDefaultKeys[0]!), okStatus: 200, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'throttle' } });
});

t.test('higher tier proxy row (custom window): N admitted, N+1 429, Throttle recovers', async (t) => {
  const c = client(t, s.url);
  await driveRow(t, { send: () => sendViaProxy(c, xHigherKey), okStatus: 200, points: 4, durationSeconds: WINDOW, mitigation: { kind: 'throttle' } });
});

t.test('the counter is the proxy key: a second proxy key of the same tenant counts apart', async (t) => {
  const c = client(t, s.url);
  // The first key may have been exhausted by the subtest above; the second starts fresh.
  // reachLimit: a 1 s window that runs out on a loaded machine starts the count over (issue 30).
  await reachLimit(t, { send: () => sendViaProxy(c, xDefaultKeys[1]!, { path: '/proxy/second' }), okStatus: 200, points: 3, durationSeconds: WINDOW });
});

t.test('one proxy key from two client IPs shares one counter', async (t) => {
  const a = client(t, s.url, '127.0.0.1');
  const b = client(t, s.url, '127.0.0.2');
  expectAllowed(t, await sendViaProxy(a, xIpsKey), 200, 2, 1, 'from 127.0.0.1:');
  expectAllowed(t, await sendViaProxy(b, xIpsKey), 200, 2, 0, 'from 127.0.0.2:');
  expect429(t, await sendViaProxy(a, xIpsKey), 2, 'third, from 127.0.0.1:');
});

t.test('a 429 is wrapped as proxy_error and never reaches the upstream', async (t) => {
  const c = client(t, s.url);
  expectAllowed(t, await sendViaProxy(c, xQuietKey, { path: '/proxy/quiet-1' }), 200, 1, 0);
  const raw = await c.send('POST', '/proxy/quiet-2', { headers: { 'svc-proxy-key': xQuietKey }, body: { a: 1 } });
  t.equal(raw.status, 429);
  t.match(raw.body, { proxy_error: { code: 'rate_limited', status: 429 } }, 'wrapped problem');
  t.notOk(raw.headers['svc-proxy-destination-status'], 'the destination was not asked');
  t.equal(up.received.filter((r) => r.url.startsWith('/quiet-2')).length, 0, 'the upstream never saw the limited request');
  t.equal(up.received.filter((r) => r.url.startsWith('/quiet-1')).length, 1, 'it saw the admitted one');
});
