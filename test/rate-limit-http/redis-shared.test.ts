/**
 * Two service instances on one real redis-server (`rate_limits.store: redis`): their counters are
 * shared, so together they admit exactly N within a window, not 2N; a Block set through one
 * instance holds on the other; Throttle recovers after the window.
 */
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { redisForFile } from '../helpers/redis.js';
import { startTestService } from '../helpers/service.js';
import { client, driveRow, expectAllowed, limitedConfig, oneToken, tenant, type Reply } from './helpers.js';

const redis = await redisForFile(t);
if (redis) {
  const keyPrefix = `${redis.prefix}rl:`;

  const seq = tenant({ custom: { private_key: { points: 5, duration_seconds: 30 } }, apps: [{ kind: 'private' }] });
  const conc = tenant({ custom: { private_key: { points: 7, duration_seconds: 30 } }, apps: [{ kind: 'private' }] });
  const blk = tenant({ custom: { public_key: { points: 2, duration_seconds: 1, block_seconds: 3 } }, apps: [{ kind: 'public' }] });
  const thr = tenant({ custom: { creating_tokens: { points: 3, duration_seconds: 1 } }, apps: [{ kind: 'private' }] });
  const config = limitedConfig([seq, conc, blk, thr], { rate_limits: { store: 'redis', url: redis.url, key_prefix: keyPrefix, timeout_ms: 1000 } });

  // Two instances, each with its own embedded token store; only the limits are shared.
  const a = await startTestService(t, { config });
  const b = await startTestService(t, { config });
  t.jobs = 4;

  t.test('sequential, alternating instances: exactly N admitted, one countdown', async (t) => {
    const ca = client(t, a.url);
    const cb = client(t, b.url);
    const key = seq.keys[0][0];
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      const r = await (i % 2 ? cb : ca).send('GET', `/tokens/${randomUUID()}`, { key });
      if (i < 5) expectAllowed(t, r, 404, 5, 4 - i, `request ${i + 1} (instance ${i % 2 ? 'b' : 'a'}):`);
      statuses.push(r.status);
    }
    t.same(statuses, [404, 404, 404, 404, 404, 429, 429, 429, 429, 429, 429, 429], '5 admitted by the two together');
  });

  t.test('concurrent, both instances: exactly N admitted, not 2N', async (t) => {
    const clients = [client(t, a.url), client(t, b.url), client(t, a.url, '127.0.0.2'), client(t, b.url, '127.0.0.2')];
    const key = conc.keys[0][0];
    const replies = await Promise.all(Array.from({ length: 40 }, (_, i) => clients[i % 4].send('GET', `/tokens/${randomUUID()}`, { key })));
    t.equal(replies.filter((r) => r.status === 404).length, 7, '7 admitted');
    t.equal(replies.filter((r) => r.status === 429).length, 33, 'the rest 429');
  });

  t.test('Block set through one instance holds on the other, past the window', async (t) => {
    const ca = client(t, a.url);
    const cb = client(t, b.url);
    let i = 0;
    await driveRow(t, {
      send: () => (i++ % 2 ? cb : ca).send('POST', '/tokenize', { key: blk.keys[0][0], body: oneToken() }),
      okStatus: 200, points: 2, durationSeconds: 1, mitigation: { kind: 'block', blockSeconds: 3 },
    });
  });

  t.test('Throttle on Redis across instances: recovers after the window', async (t) => {
    const ca = client(t, a.url);
    const cb = client(t, b.url);
    let i = 0;
    await driveRow(t, {
      send: async (): Promise<Reply> => {
        const n = i++;
        const r = await (n % 2 ? cb : ca).send('POST', n % 3 ? '/tokens' : '/tokenize', { key: thr.keys[0][0], body: oneToken() });
        return r.status === 201 ? { ...r, status: 200 } : r;
      },
      okStatus: 200, points: 3, durationSeconds: 1, mitigation: { kind: 'throttle' },
    });
  });

  t.test('the counters live in Redis under rate_limits.key_prefix', async (t) => {
    const r = new Redis(redis.url, { lazyConnect: true });
    t.teardown(() => r.disconnect());
    await r.connect();
    await client(t, a.url).send('GET', `/tokens/${randomUUID()}`, { key: seq.keys[0][0] });
    const keys = await r.keys(`${keyPrefix}*`);
    t.ok(keys.some((k) => k.startsWith(`${keyPrefix}private_key:${seq.id}:`)), 'private_key counter of the tenant');
    t.notOk(keys.some((k) => k.includes(seq.keys[0][0])), 'the key itself is never in a counter name');
  });
}
