/** Issue 23 finding 6 on the Redis store: test/audit/verify-suite.ts, tampering with the Redis keys directly. */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';
import { startTestService, TENANT_A } from '../helpers/service.js';
import { redisStore, runVerifyAuditSuite } from './verify-suite.js';

// Child processes of the CLI compile the TypeScript again: seconds each on a busy machine.
t.setTimeout(300_000);
const redis = await redisForFile(t);
if (redis) {
  const dir = mkdtempSync(join(tmpdir(), 'tp-verify-audit-redis-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const client = new Redis(redis.url);
  t.teardown(() => client.disconnect());
  runVerifyAuditSuite(t, 'redis', dir, async (t) => {
    const r = withFreshPrefix(redis);
    const s = await startTestService(t, { redis: r });
    return { s, raw: redisStore(client, redis.url, r.prefix, TENANT_A) };
  });
}
