/**
 * The token stores an access test runs on: the embedded store always, Redis as well when a
 * redis-server is installed (or REDIS_URL is set). TOKENPROXY_REQUIRE_REDIS=1 turns a missing
 * Redis into a failure, as everywhere else.
 */
import type { Test } from 'tap';
import { redisSkip, startRedis, withFreshPrefix, type RedisHandle } from '../helpers/redis.js';
import type { StartTestOptions } from '../helpers/service.js';

export interface StoreKind {
  name: 'embedded' | 'redis';
  /** Options for startTestService: a fresh data directory, or a fresh prefix on the shared server. */
  options(): StartTestOptions;
}

/** The stores to run on; a Redis server, when used, is started once and stopped on `t`'s teardown. */
export async function storeKinds(t: Test): Promise<StoreKind[]> {
  const kinds: StoreKind[] = [{ name: 'embedded', options: () => ({}) }];
  const skip = redisSkip();
  if (skip) {
    t.comment(`Redis store skipped: ${skip}`);
    return kinds;
  }
  let redis: RedisHandle | null = null;
  const shared = await startRedis();
  redis = shared;
  t.teardown(() => shared.stop());
  kinds.push({ name: 'redis', options: () => ({ redis: withFreshPrefix(redis!) }) });
  return kinds;
}
