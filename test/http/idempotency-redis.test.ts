/**
 * SVC-IDEMPOTENCY-KEY on the Redis store (the suite, with a scan of the idempotency hashes), and
 * two service instances sharing one Redis: concurrent duplicates split between them run once, and
 * Redis down: a stable 503, and nothing claimed that would block the retry.
 */
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';
import { startTestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';
import { tokenCount } from '../helpers/tokens.js';
import { cardBody, idempotencySuite } from './idempotency-suite.js';

// killable: the last test stops Redis and starts it again.
const redis = await redisForFile(t, { killable: true });
if (redis) {
  /** Every field of every idempotency hash under the prefix. */
  const entries = async (prefix: string): Promise<string[]> => {
    const client = new Redis(redis.url);
    try {
      const keys = await client.keys(`${prefix}t:*:idem:*`);
      return Promise.all(keys.map(async (k) => JSON.stringify(await client.hgetall(k))));
    } finally {
      client.disconnect();
    }
  };
  t.test('the suite on Redis', async (t) => {
    const prefix = withFreshPrefix(redis);
    idempotencySuite(t, async () => ({ redis: prefix }), () => entries(prefix.prefix));
  });

  t.test('two instances on one Redis: concurrent duplicates run once, the others are in flight (409) or replays', async (t) => {
    const shared = withFreshPrefix(redis);
    const a = await startTestService(t, { redis: shared });
    const b = await startTestService(t, { redis: shared, masterKey: a.masterKey });
    for (let round = 0; round < 3; round++) {
      const key = randomUUID();
      const body = cardBody();
      const before = await tokenCount(a);
      const rs = await Promise.all(Array.from({ length: 16 }, (_, i) => (i % 2 ? b : a).call('POST', '/tokenize', { body, headers: { 'svc-idempotency-key': key } })));
      const made = rs.filter((r) => r.status === 200 && r.headers.get('svc-idempotent-replayed') === null);
      t.equal(made.length, 1, `round ${round}: exactly one request ran`);
      t.comment(`round ${round}: ${rs.filter((r) => r.status === 409).length} in flight, ${rs.filter((r) => r.headers.get('svc-idempotent-replayed')).length} replayed`);
      t.ok(rs.every((r) => r === made[0] || (r.status === 409 && r.body.code === 'idempotency_key_in_flight')
        || (r.status === 200 && r.headers.get('svc-idempotent-replayed') === 'true' && r.text === made[0]!.text)), 'the others: 409 or the same answer replayed');
      t.equal(await tokenCount(b), before + 1, 'one token, seen by both instances');
      const late = await (rs.indexOf(made[0]!) % 2 ? a : b).call('POST', '/tokenize', { body, headers: { 'svc-idempotency-key': key } });
      t.equal(late.headers.get('svc-idempotent-replayed'), 'true', 'a retry on either instance is replayed');
      t.equal(late.text, made[0]!.text);
    }
  });

  t.test('Redis down: 503 store_unavailable, and once it is back the retry runs (no claim was left)', async (t) => {
    const s = await startTestService(t, { redis: withFreshPrefix(redis) });
    const body = cardBody();
    const key = randomUUID();
    await redis.kill();
    const down = await s.call('POST', '/tokenize', { body, headers: { 'svc-idempotency-key': key } });
    t.equal(down.status, 503);
    t.equal(down.body.code, 'store_unavailable');
    t.equal(down.headers.get('content-type'), 'application/problem+json');
    await redis.restart();
    const back = await waitFor(async () => {
      const r = await s.call('POST', '/tokenize', { body, headers: { 'svc-idempotency-key': key } });
      return r.status === 503 ? false : r;
    }, { what: 'the store answers again' });
    t.equal(back.status, 200);
    t.equal(back.headers.get('svc-idempotent-replayed'), null, 'the request ran');
    t.equal(await tokenCount(s), 1);
  });
}
