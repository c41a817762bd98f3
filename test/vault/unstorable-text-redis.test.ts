/** Text no store can hold is refused (400 naming the field), on the Redis store. */
import t from 'tap';
import { unstorableTextSuite } from './unstorable-text-suite.js';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';

const redis = await redisForFile(t);
if (redis) unstorableTextSuite(t, async () => ({ redis: withFreshPrefix(redis) }));
