/**
 * Store write metrics on the Redis token store (README "Metrics"): writes are timed under
 * store="redis", and with redis-server stopped a write counts as a store write error.
 */
import t from 'tap';
import { redisForFile } from '../helpers/redis.js';
import { startTestService } from '../helpers/service.js';
import { scrape } from './scrape.js';

const redis = await redisForFile(t, { killable: true });
if (redis) {
  t.test('redis store: write latency, tokens created, and a failed write', async (t) => {
    const s = await startTestService(t, { redis });
    const created = await s.call('POST', '/tokenize', { body: { a: 'one', b: 'two' } });
    t.equal(created.status, 200);
    t.equal((await s.call('DELETE', `/tokens/${created.body.a}`)).status, 204);
    const m = await scrape(s.url);
    t.equal(m.value('tokenproxy_store_write_duration_seconds_count', { store: 'redis', operation: 'insertMany' }), 1);
    t.equal(m.value('tokenproxy_store_write_duration_seconds_count', { store: 'redis', operation: 'delete' }), 1);
    t.equal(m.value('tokenproxy_store_write_duration_seconds_count', { store: 'embedded' }), 0, 'nothing under the other store kind');
    t.equal(m.value('tokenproxy_tokens_created_total', { type: 'token' }), 2);
    t.equal(m.value('tokenproxy_store_write_errors_total'), 0);

    await redis.kill();
    const failed = await s.call('POST', '/tokenize', { body: { a: 'during-the-outage' } });
    t.equal(failed.status, 503, failed.text);
    t.equal(failed.body?.code, 'store_unavailable');
    const after = await scrape(s.url);
    t.equal(after.value('tokenproxy_store_write_errors_total', { store: 'redis', operation: 'insertMany' }), 1, 'the failed write is counted');
    t.equal(after.value('tokenproxy_tokens_created_total', { type: 'token' }), 2, 'a failed write created nothing');
    t.equal(after.value('tokenproxy_http_request_duration_seconds_count', { route: '/tokenize', status: '503' }), 1);
    await redis.restart();
  });
}
