/**
 * Two service instances counting on a real Sentinel setup (`rate_limits.sentinel`: one primary,
 * one replica, three sentinels): exactly N admitted between them; after SIGKILL of the primary,
 * checks answer 503 rate_limit_unavailable (on_store_error: reject) until the sentinels have
 * promoted the replica, then both instances count again, on the new primary, without a restart.
 * A third instance with on_store_error: allow serves through the gap on its in-memory count.
 */
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { sentinelForFile } from '../helpers/redis-topology.js';
import { startTestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';
import { client, limitedConfig, tenant, type Reply } from './http-helpers.js';
import { exactness, exactnessTenants } from './shared-suite.js';

const sentinel = await sentinelForFile(t);
if (sentinel) {
  const exact = exactnessTenants();
  // Polled through the gap: a limit it never reaches.
  const gap = tenant({ custom: { private_key: { points: 10_000, duration_seconds: 60 } }, apps: [{ kind: 'private' }] });
  const after = tenant({ custom: { private_key: { points: 4, duration_seconds: 60 } }, apps: [{ kind: 'private' }] });
  const config = limitedConfig([exact.seq, exact.conc, gap, after], {
    rate_limits: {
      store: 'redis', sentinel: { sentinels: sentinel.sentinels, name: sentinel.name }, key_prefix: `${sentinel.prefix}rl:`,
      on_store_error: 'reject', timeout_ms: 1000,
    },
  });
  const a = await startTestService(t, { config });
  const b = await startTestService(t, { config });
  const rl = config.rate_limits as Record<string, unknown>;
  const c = await startTestService(t, { config: { ...config, rate_limits: { ...rl, on_store_error: 'allow' } } });

  // Subtests run in turn (tap's default): the failover comes last.
  exactness(t, a, b, exact);

  t.test('SIGKILL of the primary: 503 during the gap, limited again after the promotion, no restart', async (t) => {
    const clients = [client(t, a.url), client(t, b.url)];
    const allowing = client(t, c.url);
    const read = (i: number, key: string): Promise<Reply> => clients[i % 2].send('GET', `/tokens/${randomUUID()}`, { key });
    t.equal((await read(0, gap.keys[0][0])).status, 404, 'counted before the kill');

    const oldPort = await sentinel.killPrimary();
    let promoted = false;
    const promotion = sentinel.waitForPromotion(oldPort).then((p) => {
      promoted = true;
      return p;
    });
    const during: Reply[] = [];
    const allowed: Reply[] = [];
    let i = 0;
    // Until the sentinels agree on the new primary (and at least until a 503 was seen).
    await waitFor(async () => {
      const [r, ra] = await Promise.all([read(i++, gap.keys[0][0]), allowing.send('GET', `/tokens/${randomUUID()}`, { key: gap.keys[0][0] })]);
      during.push(r);
      allowed.push(ra);
      return promoted && during.some((r) => r.status === 503);
    }, { timeoutMs: 40_000, intervalMs: 50, what: 'a 503 during the gap, then the promotion' });
    const newPort = await promotion;
    t.not(newPort, oldPort, `the replica was promoted (${oldPort} → ${newPort})`);
    const refused = during.filter((r) => r.status === 503);
    t.ok(refused.length > 0, `${refused.length} of ${during.length} checks during the gap answered 503`);
    t.ok(refused.every((r) => r.body?.code === 'rate_limit_unavailable' && /^application\/problem\+json/.test(r.headers['content-type'] ?? '')),
      'each 503 is a rate_limit_unavailable problem');
    // Nothing else: no request served uncounted as 2xx without RateLimit headers, no 429 of a limit never reached.
    t.same(during.filter((r) => r.status !== 503 && !(r.status === 404 && r.headers['ratelimit-limit'] === '10000')), [],
      'every other answer was counted on Redis (404 with the rule\'s headers)');

    t.same(allowed.map((r) => r.status).filter((s) => s !== 404), [], `on_store_error: allow served all ${allowed.length} requests through the gap`);
    t.match(c.logs(), /"event":"rate_limit_store_error"[^\n]*"on_store_error":"allow"/, 'and logged the store failure');

    // Both instances find the new primary on their own.
    for (const n of [0, 1]) {
      await waitFor(async () => (await read(n, gap.keys[0][0])).status === 404, {
        timeoutMs: 30_000, intervalMs: 100, what: `instance ${n ? 'b' : 'a'} counts again after the promotion`,
      });
    }
    const statuses: number[] = [];
    for (let j = 0; j < 8; j++) statuses.push((await read(j, after.keys[0][0])).status);
    t.same(statuses, [404, 404, 404, 404, 429, 429, 429, 429], 'exactly N admitted by the two instances, on the new primary');
  });
}
