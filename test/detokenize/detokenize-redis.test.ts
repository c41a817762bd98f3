/** Detokenization suite on the Redis store; tampering edits the Redis list directly. */
import t from 'tap';
import { Redis } from 'ioredis';
import { redisForFile, withFreshPrefix, type RedisHandle } from '../helpers/redis.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { detokenizeConfig, runDetokenizeSuite } from './detokenize-suite.js';

const redis = await redisForFile(t);
if (redis) {
  const prefixes = new WeakMap<TestService, RedisHandle>();
  const client = new Redis(redis.url);
  t.teardown(() => client.disconnect());
  const listKey = (s: TestService, tenant: string) => `${prefixes.get(s)!.prefix}t:{${encodeURIComponent(tenant)}}:audit`;
  runDetokenizeSuite(t, {
    start: async (t) => {
      const r = withFreshPrefix(redis);
      const s = await startTestService(t, { config: detokenizeConfig(), redis: r });
      prefixes.set(s, r);
      return s;
    },
    deleteEvent: async (s, tenant, seq) => {
      await client.lset(listKey(s, tenant), seq - 1, '__removed__');
      await client.lrem(listKey(s, tenant), 1, '__removed__');
    },
    editEvent: async (s, tenant, seq, edit) => {
      const json = await client.lindex(listKey(s, tenant), seq - 1);
      await client.lset(listKey(s, tenant), seq - 1, edit(json!));
    },
    rawEvents: (s, tenant) => client.lrange(listKey(s, tenant), 0, -1),
    storeConfig: (s) => ({ kind: 'redis', url: redis.url, key_prefix: prefixes.get(s)!.prefix }),
  });
}
