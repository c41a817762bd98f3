/** The tokens suite on the Redis store (a real redis-server per file, its own key prefix per service). */
import t from 'tap';
import { tokensSuite } from '../integration/tokens-suite.js';
import { redisSkip, startRedis, type RedisHandle } from '../helpers/redis.js';

const skip = redisSkip();
if (skip) {
  t.plan(0, skip);
} else {
  let redis: RedisHandle | undefined;
  t.before(async () => {
    redis = await startRedis();
  });
  t.teardown(() => redis?.stop());
  // Every service started by the suite gets a fresh prefix on the shared server.
  tokensSuite(t, async () => ({ redis: { ...redis!, prefix: `${redis!.prefix}${Math.random().toString(36).slice(2, 8)}:` } }));
}
