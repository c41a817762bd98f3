/** The token types and alias ids over HTTP on the Redis store (issue 26: every store). */
import t from 'tap';
import { startTestService } from '../helpers/service.js';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';
import { typesOverHttp } from './token-types-suite.js';

const redis = await redisForFile(t);
if (redis) t.test('on Redis', async (t) => typesOverHttp(t, await startTestService(t, { redis: withFreshPrefix(redis) })));
