/**
 * Redis killed under running instances (`rate_limits.store: redis`):
 * - `on_store_error: reject` answers 503 rate_limit_unavailable (a problem body, no cause message),
 *   without hanging, and nothing reaches the token store;
 * - `allow` serves, counting on the instance alone (a flood from one key is still stopped), and logs
 *   the failure once per interval, not per request;
 * - after the restart, both instances enforce shared limits on Redis again, without a restart.
 */
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { redisForFile } from '../helpers/redis.js';
import { startTestService } from '../helpers/service.js';
import { client, expect429, expectAllowed, limitedConfig, oneToken, sleep, tenant, type HttpClient, type Reply } from './http-helpers.js';

const redis = await redisForFile(t, { killable: true });
if (redis) {
  const keyPrefix = `${redis.prefix}rl:`;
  const TIMEOUT_MS = 300;
  // No hang: far above timeout_ms, far below any request timeout. Not a speed assertion.
  const NO_HANG_MS = 5_000;

  const before = tenant({ custom: { private_key: { points: 3, duration_seconds: 60 } }, apps: [{ kind: 'private' }] });
  const down = tenant({ custom: { private_key: { points: 3, duration_seconds: 60 } }, apps: [{ kind: 'private' }, { kind: 'private' }] });
  const after = tenant({ custom: { private_key: { points: 4, duration_seconds: 60 } }, apps: [{ kind: 'private' }] });
  // Polls for the recovery (default limits: its count never gets in the way).
  const probe = tenant({ apps: [{ kind: 'private' }] });
  const tenants = [before, down, after, probe];
  const rl = (mode: 'reject' | 'allow') => ({ store: 'redis', url: redis.url, key_prefix: keyPrefix, on_store_error: mode, timeout_ms: TIMEOUT_MS });
  const rejecting = await startTestService(t, { config: limitedConfig(tenants, { rate_limits: rl('reject') }) });
  const allowing = await startTestService(t, { config: limitedConfig(tenants, { rate_limits: rl('allow') }) });

  const missing = () => `/tokens/${randomUUID()}`;
  const timed = async (p: Promise<Reply>): Promise<[Reply, number]> => {
    const start = Date.now();
    const r = await p;
    return [r, Date.now() - start];
  };
  const counterKeys = async (): Promise<string[]> => {
    const r = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    try {
      await r.connect();
      return await r.keys(`${keyPrefix}*`);
    } finally {
      r.disconnect();
    }
  };

  t.test('killed, then restarted', async (t) => {
    const cr = client(t, rejecting.url);
    const ca = client(t, allowing.url);

    // Up: both instances count on Redis, together.
    expectAllowed(t, await cr.send('GET', missing(), { key: before.keys[0][0] }), 404, 3, 2, 'up, reject instance:');
    expectAllowed(t, await ca.send('GET', missing(), { key: before.keys[0][0] }), 404, 3, 1, 'up, allow instance (shared count):');

    await redis.kill();

    // reject: 503 problem, every time, no hang, no cause message; nothing written.
    for (let i = 0; i < 3; i++) {
      const [r, ms] = await timed(cr.send('POST', '/tokenize', { key: down.keys[0][0], body: { v: `written-while-down-${i}` } }));
      t.equal(r.status, 503, `reject: 503 (${r.text})`);
      t.match(r.headers['content-type'], /^application\/problem\+json/);
      t.match(r.body, { code: 'rate_limit_unavailable', status: 503, title: 'The rate-limit store is unavailable' });
      t.notMatch(r.text, /ECONNREFUSED|redis|connection|127\.0\.0\.1/i, 'no cause message in the body');
      t.ok(ms < NO_HANG_MS, `reject: answered without hanging (${ms} ms)`);
    }
    const listed = await cr.send('GET', '/tokens', { key: down.keys[0][0] });
    t.equal(listed.status, 503, 'listing is limited too: 503 while Redis is down');

    // allow: served, counted per instance (the limits still hold on this instance).
    for (let i = 1; i <= 3; i++) {
      const [r, ms] = await timed(ca.send('GET', missing(), { key: down.keys[1][0] }));
      expectAllowed(t, r, 404, 3, 3 - i, `allow: served while Redis is down, request ${i}:`);
      t.ok(ms < NO_HANG_MS, `allow: answered without hanging (${ms} ms)`);
    }
    expect429(t, await ca.send('GET', missing(), { key: down.keys[1][0] }), 3, 'allow: the per-instance count still stops a flood:');
    t.equal(allowing.logs().split('\n').filter((l) => l.includes('"event":"rate_limit_store_error"')).length, 1, 'allow: the failure is logged once per interval, not per request');
    t.match(allowing.logs(), /"on_store_error":"allow"/);

    await redis.restart();

    // Recovery without restarting the services: poll until the reject instance serves again.
    const waitServed = async (c: HttpClient, key: string) => {
      const deadline = Date.now() + 15_000;
      for (;;) {
        const r = await c.send('GET', '/tokens', { key });
        if (r.status !== 503 || Date.now() > deadline) return r;
        await sleep(100);
      }
    };
    const back = await waitServed(cr, probe.keys[0][0]);
    t.equal(back.status, 200, 'reject instance serves again after the restart');
    // The allow instance reconnects on its own schedule, and until it has, it serves from its
    // memory counters (which would make the shared count below per instance): poll it until it
    // logs the recovery, i.e. a check succeeded on Redis again.
    const recovered = () => allowing.logs().includes('"event":"rate_limit_store_recovered"');
    for (const deadline = Date.now() + 15_000; !recovered() && Date.now() < deadline; ) {
      await ca.send('GET', '/tokens', { key: probe.keys[0][0] });
      await sleep(100);
    }

    // Shared limits again: the two instances together admit exactly 4 of a fresh key's requests.
    const key = after.keys[0][0];
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) statuses.push((await (i % 2 ? ca : cr).send('GET', missing(), { key })).status);
    t.same(statuses, [404, 404, 404, 404, 429, 429, 429, 429], 'exactly N across both instances (counted on Redis, not per instance)');
    const keys = await counterKeys();
    t.ok(keys.some((k) => k.startsWith(`${keyPrefix}private_key:{${after.id}}:`)), 'the counter is in Redis again');
    t.match(allowing.logs(), /"event":"rate_limit_store_recovered"/, 'recovery is logged');

    // Nothing from the rejected tokenize requests reached the store.
    const all = await cr.send('GET', '/tokens?size=100', { key: down.keys[0][0] });
    t.equal(all.status, 200);
    t.same((all.body as { data: unknown[] }).data, [], 'no token from a request refused with 503');
    expectAllowed(t, await cr.send('POST', '/tokenize', { key: down.keys[0][0], body: oneToken() }), 200, 3, 1, 'writes again:');
  });
}
