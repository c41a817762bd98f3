/**
 * Counter scoping through HTTP: a rule counting by "SVC-API-KEY and client IP" counts two client
 * IPs apart and two keys apart; a rule counting by key counts two keys of one application apart; a
 * spoofed X-Forwarded-For from a peer that is not a trusted proxy changes nothing; from a trusted
 * proxy, the right-most untrusted X-Forwarded-For address is the client.
 *
 * Two client IPs from one machine: the client binds 127.0.0.1 or 127.0.0.2 (loopback is /8 on Linux).
 */
import t, { type Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { startTestService } from '../helpers/service.js';
import { client, expect429, expectAllowed, limitedConfig, oneToken, tenant, type HttpClient } from './http-helpers.js';

const LONG = { duration_seconds: 60, block_seconds: 60 };
const pub = tenant({ custom: { public_key: { points: 2, ...LONG } }, apps: [{ kind: 'public', keys: 2 }] });
const priv = tenant({ custom: { private_key: { points: 2, duration_seconds: 60 } }, apps: [{ kind: 'private', keys: 2 }] });
const spoofPub = tenant({ custom: { public_key: { points: 2, ...LONG } }, apps: [{ kind: 'public' }] });
const spoofLegacy = tenant({ custom: { legacy_global: { points: 2, ...LONG } }, apps: [{ kind: 'private', legacy: true }] });
const trusted = tenant({ custom: { public_key: { points: 1, ...LONG } }, apps: [{ kind: 'public' }] });

const s = await startTestService(t, { config: limitedConfig([pub, priv, spoofPub, spoofLegacy]) });
// Another instance behind a (simulated) reverse proxy on 127.0.0.1.
const behindProxy = await startTestService(t, {
  config: limitedConfig([trusted], { server: { trust_proxy: ['127.0.0.1/32'] } }),
});

const tokenize = (c: HttpClient, key: string, headers: Record<string, string> = {}) => c.send('POST', '/tokenize', { key, body: oneToken(), headers });

/** `points` admitted (remaining counting down), then a 429. */
async function exhaust(t: Test, send: () => ReturnType<HttpClient['send']>, points: number, okStatus: number, what: string): Promise<void> {
  for (let i = 1; i <= points; i++) expectAllowed(t, await send(), okStatus, points, points - i, `${what} ${i}:`);
  expect429(t, await send(), points, `${what} ${points + 1}:`);
}

t.test('public key (counter: key and client IP): two IPs count apart, two keys count apart', async (t) => {
  const ip1 = client(t, s.url, '127.0.0.1');
  const ip2 = client(t, s.url, '127.0.0.2');
  const [k1, k2] = pub.keys[0];
  await exhaust(t, () => tokenize(ip1, k1), 2, 200, 'key 1 from 127.0.0.1:');
  await exhaust(t, () => tokenize(ip2, k1), 2, 200, 'key 1 from 127.0.0.2:');
  await exhaust(t, () => tokenize(ip1, k2), 2, 200, 'key 2 from 127.0.0.1:');
  expect429(t, await tokenize(ip2, k1), 2, 'key 1 from 127.0.0.2 still blocked:');
});

t.test('private key (counter: key): two keys of one application count apart; the IP does not matter', async (t) => {
  const ip1 = client(t, s.url, '127.0.0.1');
  const ip2 = client(t, s.url, '127.0.0.2');
  const [k1, k2] = priv.keys[0];
  let n = 0;
  // Alternating client IPs: one counter, because the rule counts by key alone.
  await exhaust(t, () => (n++ % 2 ? ip2 : ip1).send('GET', `/tokens/${randomUUID()}`, { key: k1 }), 2, 404, 'key 1 from either IP:');
  await exhaust(t, () => ip1.send('GET', `/tokens/${randomUUID()}`, { key: k2 }), 2, 404, 'key 2:');
});

t.test('a spoofed X-Forwarded-For from an untrusted peer changes nothing', async (t) => {
  const c = client(t, s.url);
  let n = 0;
  const spoof = () => ({ 'x-forwarded-for': `198.51.100.${++n}`, forwarded: `for=203.0.113.${n}`, 'x-real-ip': `203.0.113.${n}` });
  await exhaust(t, () => tokenize(c, spoofPub.keys[0][0], spoof()), 2, 200, 'public key, new X-Forwarded-For each time:');
  // The legacy rules count by client IP alone: the spoof would matter most there.
  await exhaust(t, () => c.send('GET', `/tokens/${randomUUID()}`, { key: spoofLegacy.keys[0][0], headers: spoof() }), 2, 404, 'legacy (per IP), spoofed:');
});

t.test('behind a trusted proxy: X-Forwarded-For names the client, right-most untrusted hop first', async (t) => {
  const proxy = client(t, behindProxy.url, '127.0.0.1');
  const key = trusted.keys[0][0];
  // Two clients behind the proxy count apart.
  await exhaust(t, () => tokenize(proxy, key, { 'x-forwarded-for': '203.0.113.10' }), 1, 200, 'client 203.0.113.10:');
  await exhaust(t, () => tokenize(proxy, key, { 'x-forwarded-for': '203.0.113.11' }), 1, 200, 'client 203.0.113.11:');
  // A client that prepends its own X-Forwarded-For is still 203.0.113.10 (the proxy appended it).
  expect429(t, await tokenize(proxy, key, { 'x-forwarded-for': '192.0.2.99, 203.0.113.10' }), 1, 'prepended spoof:');
  // Trusted hops are skipped from the right: 127.0.0.1 is the proxy itself.
  expect429(t, await tokenize(proxy, key, { 'x-forwarded-for': '203.0.113.11, 127.0.0.1' }), 1, 'trusted hop skipped:');
  // A peer that is not in trust_proxy is counted by its socket address, whatever it sends.
  const direct = client(t, behindProxy.url, '127.0.0.2');
  expectAllowed(t, await tokenize(direct, key, { 'x-forwarded-for': '203.0.113.10' }), 200, 1, 0, 'untrusted peer 127.0.0.2:');
  expect429(t, await tokenize(direct, key, { 'x-forwarded-for': '203.0.113.12' }), 1, 'untrusted peer, other spoof:');
});
