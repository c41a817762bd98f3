/** The audit chain never signs what it did not write, on the Redis store: anchor-refusal-suite.ts, tampering with the Redis keys directly. */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';
import { startTestService, TENANT_A } from '../helpers/service.js';
import { runAnchorRefusalSuite, tamperOf } from './anchor-refusal-suite.js';
import { redisStore } from './verify-suite.js';

t.setTimeout(300_000);
const redis = await redisForFile(t);
if (redis) {
  const dir = mkdtempSync(join(tmpdir(), 'tp-anchor-refusal-redis-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const client = new Redis(redis.url);
  t.teardown(() => client.disconnect());
  runAnchorRefusalSuite(t, 'redis', dir, async (t) => {
    const r = withFreshPrefix(redis);
    const s = await startTestService(t, { redis: r });
    return { s, tamper: tamperOf(redisStore(client, redis.url, r.prefix, TENANT_A)) };
  });
}
