/**
 * Fuzz suite (fuzz-suite.ts) on the Redis store, the in-process volume: generated /tokenize and
 * /tokens bodies, on a key prefix of its own of a real redis-server (the bodies over HTTP:
 * fuzz-http-redis.test.ts, on a redis-server of their own). Without AOF: durability is not what
 * this suite tests (test/store/durability.test.ts does), and an fsync per write would cost
 * most of its volume. The store's count is read around the service, from the tenant's hash of
 * records (store/redis/ layout 4: P t:{T}:r), every 100 bodies and at the end.
 */
import t from 'tap';
import { Redis } from 'ioredis';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';
import { fuzzStore, redisPhase } from './fuzz-suite.js';

const redis = await redisForFile(t, { durable: false });
if (redis) {
  const client = new Redis(redis.url);
  t.teardown(() => client.disconnect());
  await fuzzStore(t, { inProcess: redisPhase(client, withFreshPrefix(redis), Number(process.env.FUZZ_IN_PROCESS ?? 30_000)) });
}
