/**
 * Fuzz suite (fuzz-suite.ts) on the Redis store: generated /tokenize and /tokens bodies, in-process and
 * over HTTP, each on its own key prefix of a real redis-server. Without AOF: durability is not what
 * this suite tests (test/store/durability.test.ts does), and an fsync per write would cost
 * most of its volume. The store's count is read around the service, from the tenant's hash of
 * records (store/redis/ layout 4: P t:{T}:r), every 100 bodies and at the end.
 */
import t from 'tap';
import { Redis } from 'ioredis';
import { redisForFile, withFreshPrefix, type RedisHandle } from '../helpers/redis.js';
import { TENANT_A } from '../helpers/service.js';
import { fuzzStore, type Phase } from './fuzz-suite.js';

const redis = await redisForFile(t, { durable: false });
if (redis) {
  const client = new Redis(redis.url);
  t.teardown(() => client.disconnect());
  const phase = (r: RedisHandle, runs: number): Phase => {
    const records = `${r.prefix}t:{${encodeURIComponent(TENANT_A)}}:r`;
    return {
      service: { redis: r },
      runs,
      countTokens: () => client.hlen(records),
      cheap: true,
    };
  };
  await fuzzStore(t, {
    inProcess: phase(withFreshPrefix(redis), Number(process.env.FUZZ_IN_PROCESS ?? 55_000)),
    http: phase(withFreshPrefix(redis), Number(process.env.FUZZ_HTTP ?? 1000)),
  });
}
