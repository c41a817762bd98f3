/**
 * IPv6 clients are counted per prefix, and public keys have a ceiling across all addresses
 * (issue 31, finding 3). Behind a trusted proxy, `X-Forwarded-For: 2001:db8:1:2::1` was held to
 * the public-key rule, but rotating the low bits inside one /64 (addresses a single host owns)
 * gave a fresh counter each time: 60 of 60 admitted. Now every per-IP rule counts an IPv6 client by
 * its /64 (`server.ipv6_prefix` changes it), and `public_key_total` caps a public key over every
 * address. Count-based: each rule gets small points and a window far longer than the test.
 */
import { randomUUID } from 'node:crypto';
import t, { type Test } from 'tap';
import { startTestService } from '../helpers/service.js';
import { client, expect429, expectAllowed, limitedConfig, oneToken, tenant, type HttpClient } from './http-helpers.js';

const LONG = { duration_seconds: 600, block_seconds: 600 };
const TRUST = { trust_proxy: ['127.0.0.1/32'] };

const pub = tenant({ custom: { public_key: { points: 5, ...LONG } }, apps: [{ kind: 'public', keys: 3 }] });
const legacy = tenant({ custom: { legacy_global: { points: 4, ...LONG } }, apps: [{ kind: 'private', legacy: true }] });
const ceiling = tenant({ custom: { public_key: { points: 3, ...LONG }, public_key_total: { points: 7, duration_seconds: 600 } }, apps: [{ kind: 'public', keys: 2 }] });
const wide = tenant({ custom: { public_key: { points: 3, ...LONG } }, apps: [{ kind: 'public' }] });

const s = await startTestService(t, { config: limitedConfig([pub, legacy], { server: TRUST }) });

const tokenize = (c: HttpClient, key: string, from: string) => c.send('POST', '/tokenize', { key, body: oneToken(), headers: { 'x-forwarded-for': from } });

/** A different address of the /64 `prefix` (four hextets) each call: every low hextet changes. */
function rotating(prefix: string): () => string {
  let n = 0;
  const h = (x: number) => (x % 0xffff).toString(16);
  return () => {
    n++;
    return `${prefix}:${h(n)}:${h(n * 7919)}:${h(n * 104_729)}:${h(n * 31 + 1)}`;
  };
}

t.test('regression: rotating addresses inside one /64 got a fresh public-key counter each time', async (t) => {
  const c = client(t, s.url);
  const [k1, k2] = pub.keys[0];
  const next = rotating('2001:db8:1:2');
  let admitted = 0;
  for (let i = 0; i < 12; i++) if ((await tokenize(c, k1, next())).status === 200) admitted++;
  t.equal(admitted, 5, 'one /64: held to the public_key rule (5), not 12 of 12');
  expect429(t, await tokenize(c, k1, '2001:db8:1:2::1'), 5, 'the /64 is blocked:');
  // Another /64 is another client; another key from the same /64 is another counter.
  expectAllowed(t, await tokenize(c, k1, '2001:db8:1:3::1'), 200, 5, 4, 'another /64:');
  expectAllowed(t, await tokenize(c, k2, '2001:db8:1:2::1'), 200, 5, 4, 'another key, same /64:');
  // The same /64 written differently is the same client.
  expect429(t, await tokenize(c, k1, '[2001:0DB8:0001:0002:0:0:0:ffff]:443'), 5, 'same /64, other spelling:');
});

t.test('IPv4-mapped IPv6 counts as its IPv4 address', async (t) => {
  const c = client(t, s.url);
  const k3 = pub.keys[0][2];
  for (let i = 1; i <= 5; i++) {
    const from = i % 2 ? '203.0.113.7' : '::ffff:203.0.113.7';
    expectAllowed(t, await tokenize(c, k3, from), 200, 5, 5 - i, `${from}:`);
  }
  expect429(t, await tokenize(c, k3, '::ffff:cb00:7107'), 5, 'mapped (hex) is the same client:');
  expectAllowed(t, await tokenize(c, k3, '203.0.113.8'), 200, 5, 4, 'the next IPv4 address is another client:');
});

t.test('legacy rules (counter: client IP) count per /64 too', async (t) => {
  const c = client(t, s.url);
  const key = legacy.keys[0][0];
  const next = rotating('2001:db8:9:9');
  const statuses: number[] = [];
  for (let i = 0; i < 8; i++) statuses.push((await c.send('GET', `/tokens/${randomUUID()}`, { key, headers: { 'x-forwarded-for': next() } })).status);
  t.same(statuses, [404, 404, 404, 404, 429, 429, 429, 429], 'legacy_global: 4 per /64');
  t.equal((await c.send('GET', `/tokens/${randomUUID()}`, { key, headers: { 'x-forwarded-for': '2001:db8:9:a::1' } })).status, 404, 'another /64 is admitted');
});

t.test('public_key_total: a public key is capped across all addresses', async (t) => {
  const sc = await startTestService(t, { config: limitedConfig([ceiling], { server: TRUST }) });
  const c = client(t, sc.url);
  const [key, other] = ceiling.keys[0];
  // 7 admitted from 7 different clients (each far below its per-IP limit of 3), then every
  // address is refused, IPv4 and IPv6, by the per-key rule.
  const from = (i: number) => (i % 2 ? `2001:db8:${i.toString(16)}::1` : `198.51.100.${i}`);
  for (let i = 1; i <= 7; i++) {
    const r = await tokenize(c, key, from(i));
    // The headers describe the rule with the fewest points left: the address's until the key's
    // ceiling has fewer (a tie at client 5 may show either).
    if (i < 5) expectAllowed(t, r, 200, 3, 2, `client ${i}:`);
    else if (i > 5) expectAllowed(t, r, 200, 7, 7 - i, `client ${i}:`);
    else t.equal(r.status, 200, `client ${i}: admitted`);
  }
  for (let i = 8; i <= 12; i++) {
    const r = await tokenize(c, key, from(i));
    expect429(t, r, 7, `client ${i}:`);
    t.match(r.body?.detail, /public_key_total/, `client ${i}: the ceiling answered`);
  }
  expectAllowed(t, await tokenize(c, other, from(13)), 200, 3, 2, 'another key of the same application has its own ceiling');
});

t.test('server.ipv6_prefix: 48 counts a /48 as one client', async (t) => {
  const s48 = await startTestService(t, { config: limitedConfig([wide], { server: { ...TRUST, ipv6_prefix: 48 } }) });
  const c = client(t, s48.url);
  const key = wide.keys[0][0];
  const statuses: number[] = [];
  for (let i = 0; i < 5; i++) statuses.push((await tokenize(c, key, `2001:db8:7:${i.toString(16)}::1`)).status);
  t.same(statuses, [200, 200, 200, 429, 429], 'five /64s of one /48: one counter of 3');
  expectAllowed(t, await tokenize(c, key, '2001:db8:8::1'), 200, 3, 2, 'another /48:');
});

t.test('the ceiling has a documented default, 10× the public-key rule', async (t: Test) => {
  const { TIERS } = await import('../../src/rate-limit/rules.js');
  const tiers = TIERS as unknown as Record<string, Record<string, { points: number; durationSeconds: number }>>;
  for (const tier of ['default', 'higher']) {
    const total = tiers[tier]!.public_key_total;
    t.ok(total, `${tier}: public_key_total exists`);
    t.equal(total?.points, 10 * tiers[tier]!.public_key!.points, `${tier}: 10× public_key`);
    t.equal(total?.durationSeconds, tiers[tier]!.public_key!.durationSeconds, `${tier}: the same window`);
  }
});
