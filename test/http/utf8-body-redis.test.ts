/** JSON bodies must be UTF-8, on the Redis store: the suite of utf8-body-suite.ts. */
import t from 'tap';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';
import { utf8Suite } from './utf8-body-suite.js';

const redis = await redisForFile(t);
if (redis) utf8Suite(t, async () => ({ redis: withFreshPrefix(redis) }));
