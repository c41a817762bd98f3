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
import { client, driveRow, limitedConfig, oneToken, tenant, type Reply } from './http-helpers.js';
import { blockAcross, blockTenant, exactness, exactnessTenants } from './shared-suite.js';

const redis = await redisForFile(t);
if (redis) {
  const keyPrefix = `${redis.prefix}rl:`;

  const { seq, conc } = exactnessTenants();
  const blk = blockTenant();
  const thr = tenant({ custom: { creating_tokens: { points: 3, duration_seconds: 1 } }, apps: [{ kind: 'private' }] });
  // The counter-naming check spends a point of its own tenant: the exactness checks run beside
  // it (t.jobs) and count every point of theirs.
  const own = tenant({ custom: { private_key: { points: 50, duration_seconds: 30 } }, apps: [{ kind: 'private' }] });
  const config = limitedConfig([seq, conc, blk, thr, own], { rate_limits: { store: 'redis', url: redis.url, key_prefix: keyPrefix, timeout_ms: 1000 } });

  // Two instances, each with its own embedded token store; only the limits are shared.
  const a = await startTestService(t, { config });
  const b = await startTestService(t, { config });
  t.jobs = 4;

  exactness(t, a, b, { seq, conc });

  blockAcross(t, a, b, blk);

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
    await client(t, a.url).send('GET', `/tokens/${randomUUID()}`, { key: own.keys[0][0] });
    const keys = await r.keys(`${keyPrefix}*`);
    t.ok(keys.some((k) => k.startsWith(`${keyPrefix}private_key:{${own.id}}:`)), 'private_key counter of the tenant');
    t.notOk(keys.some((k) => k.includes(own.keys[0][0])), 'the key itself is never in a counter name');
  });
}
