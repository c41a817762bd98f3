/** The SDK iteration suite (test/compat/sdk-iterate-suite.ts, issue 28) on the Redis store: a real redis-server, a fresh key prefix. */
import t from 'tap';
import { sdkIterateSuite } from './sdk-iterate-suite.js';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';

const redis = await redisForFile(t);
if (redis) sdkIterateSuite(t, async () => ({ redis: withFreshPrefix(redis) }));
