/** `server.workers: 2` with `rate_limits.store: redis`: the two workers admit exactly N for a rule. */
import t from 'tap';
import { startCluster } from '../helpers/cluster.js';
import { redisForFile } from '../helpers/redis.js';
import { limitedConfig, tenant } from '../rate-limit/http-helpers.js';
import { exactlyN } from './workers-suite.js';

t.setTimeout(600_000);
const redis = await redisForFile(t);
if (redis) {
  const N = 7;
  const limited = tenant({ custom: { private_key: { points: N, duration_seconds: 300 } }, apps: [{ kind: 'private' }] });
  const rateLimits = { store: 'redis', url: redis.url, key_prefix: `${redis.prefix}rl:`, timeout_ms: 2000 };
  const svc = await startCluster(t, limitedConfig([limited], { rate_limits: rateLimits }));
  t.test('redis limits: two workers admit exactly N', async (t) => {
    await exactlyN(t, svc, limited.keys[0][0], N);
    await svc.stop();
    t.equal(svc.child.exitCode, 0);
  });
}
