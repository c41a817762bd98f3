/** The tokens suite on the Redis store (a real redis-server per file, its own key prefix per service). */
import t from 'tap';
import { tokensSuite } from './tokens-suite.js';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';

const redis = await redisForFile(t);
// Every service started by the suite gets a fresh prefix on the shared server.
if (redis) tokensSuite(t, async () => ({ redis: withFreshPrefix(redis) }));
