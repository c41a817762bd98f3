/**
 * The Redis token store's redis-server stopped under a running service (issue 10, untested
 * paths): `/readyz` answers 503 `store_unavailable` and token routes answer 503
 * `store_unavailable` (problem bodies that name no cause), promptly rather than hanging; `/healthz`
 * still answers 200 (the process is alive); once redis-server is back, both recover without a
 * restart of the service.
 */
import t from 'tap';
import { redisForFile } from '../helpers/redis.js';
import { startTestService } from '../helpers/service.js';

const redis = await redisForFile(t, { killable: true });
if (redis) {
  // Not a speed assertion: far above any store timeout, far below a hang.
  const NO_HANG_MS = 15_000;

  t.test('redis-server stopped, then started again', async (t) => {
    const s = await startTestService(t, { redis });
    const ready = await s.call('GET', '/readyz', { key: null });
    t.equal(ready.status, 200);
    // The helper's redis-server has an append-only file, fsynced at every write.
    t.same(ready.body, { status: 'ready', store: 'redis', durability: { appendonly: 'yes', appendfsync: 'always', accepted_loss: false } });
    const created = await s.call('POST', '/tokens', { body: { type: 'token', data: 'before-the-outage' } });
    t.equal(created.status, 201);

    await redis.kill();

    const timed = async (p: Promise<{ status: number; body: any; text: string; headers: Headers }>) => {
      const start = performance.now();
      const r = await p;
      return { ...r, ms: performance.now() - start };
    };
    const down = await timed(s.call('GET', '/readyz', { key: null }));
    t.equal(down.status, 503, down.text);
    t.equal(down.body?.code, 'store_unavailable');
    t.equal(down.headers.get('content-type'), 'application/problem+json');
    t.ok(down.ms < NO_HANG_MS, `/readyz answered in ${Math.round(down.ms)} ms`);

    const read = await timed(s.call('GET', `/tokens/${created.body.id}`));
    t.equal(read.status, 503, read.text);
    t.equal(read.body?.code, 'store_unavailable');
    t.ok(read.ms < NO_HANG_MS, `a read answered in ${Math.round(read.ms)} ms`);
    t.notMatch(read.text, /ECONNREFUSED|127\.0\.0\.1|redis:\/\//i, 'the problem names no cause');

    const write = await timed(s.call('POST', '/tokenize', { body: { a: 'during-the-outage' } }));
    t.equal(write.status, 503, write.text);
    t.equal(write.body?.code, 'store_unavailable');

    t.equal((await s.call('GET', '/healthz', { key: null })).status, 200, '/healthz: the process is alive');

    await redis.restart();
    // Recovery is the client's reconnect: poll for it (bounded), never a fixed sleep.
    const deadline = Date.now() + 30_000;
    let back = await s.call('GET', '/readyz', { key: null });
    while (back.status !== 200 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      back = await s.call('GET', '/readyz', { key: null });
    }
    t.equal(back.status, 200, '/readyz is ready again');
    const again = await s.call('GET', `/tokens/${created.body.id}`);
    t.equal(again.status, 200, 'the token written before the outage reads again (AOF)');
    t.equal(again.body.data, 'before-the-outage');
  });
}
