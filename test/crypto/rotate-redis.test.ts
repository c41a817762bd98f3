/** Data-key rotation with the service running, on the Redis store (see rotate-suite.ts). */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';
import { rotateSuite } from './rotate-suite.js';

const redis = await redisForFile(t);
if (redis) {
  const root = mkdtempSync(join(tmpdir(), 'tp-rotate-redis-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  t.test('redis store', (t) => rotateSuite(t, root, { kind: 'redis', path: './unused.db', url: redis.url, key_prefix: withFreshPrefix(redis).prefix }));
}
