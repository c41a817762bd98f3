/**
 * README promises no test exercised (issue 30, "Also"):
 *
 * - "Audit trail": `GET /logs?…&start_date=&end_date=…`: the `end_date` filter (a test covered
 *   `start_date` in the future only). Checked on both stores: the end is inclusive, to the
 *   millisecond, combines with `start_date`, `entity_id` and paging.
 * - "Detokenization": `POST /detokenize` "Rate limits: counted like `GET /tokens/{id}`": on the
 *   same counters as a read (here `private_key`), and not on the listing or creating rules.
 */
import t, { type Test } from 'tap';
import { redisSkip, startRedis, type RedisHandle } from '../helpers/redis.js';
import { randomCard } from '../helpers/secrets.js';
import { baseConfig, startTestService } from '../helpers/service.js';

const MGMT = 'promises_detok_mgmt_key_aaaaaaaaaaa';

type Event = { seq: number; created_at: string; token_ids: string[] };

async function endDate(t: Test, redis?: RedisHandle): Promise<void> {
  const config = baseConfig() as { tenants: Array<{ applications: unknown[] }> };
  config.tenants[0]!.applications.push({ id: 'aaaaaaaa-0000-4000-8000-0000000000c1', name: 'mgmt', type: 'management', keys: [MGMT], permissions: ['log:read'] });
  const s = await startTestService(t, { config, redis });
  const created = await s.call('POST', '/tokenize', { body: [randomCard(), 'second value'] });
  t.equal(created.status, 200, created.text);
  const [a, b] = created.body as [string, string];
  const logs = async (query: string): Promise<{ data: Event[]; next: string | null }> => {
    const r = await s.call('GET', `/logs?${query}`, { key: MGMT });
    t.equal(r.status, 200, `${query}: ${r.text.slice(0, 200)}`);
    return { data: r.body.data, next: r.body.pagination.next };
  };
  // Three reveals, each in a later millisecond than the one before (the clock is shared with the service).
  const events: Event[] = [];
  for (const id of [a, b, a]) {
    const last = events.at(-1);
    if (last) while (Date.now() <= Date.parse(last.created_at)) await new Promise((r) => setImmediate(r));
    t.equal((await s.call('GET', `/tokens/${id}`)).status, 200);
    events.push((await logs('size=1')).data[0]!);
  }
  t.same(events.map((e) => e.seq), [1, 2, 3]);
  const [e1, e2, e3] = events as [Event, Event, Event];
  const seqs = async (query: string) => (await logs(query)).data.map((e) => e.seq);
  const at = (e: Event, deltaMs = 0) => encodeURIComponent(new Date(Date.parse(e.created_at) + deltaMs).toISOString());

  t.same(await seqs(`end_date=${at(e1)}`), [1], 'end_date is inclusive: the event at that millisecond');
  t.same(await seqs(`end_date=${at(e1, -1)}`), [], 'nothing before the first event');
  t.same(await seqs(`end_date=${at(e2)}`), [2, 1], 'newest first, up to end_date');
  t.same(await seqs(`end_date=${at(e3)}`), [3, 2, 1]);
  t.same(await seqs(`start_date=${at(e2)}&end_date=${at(e2)}`), [2], 'with start_date: the one event between');
  t.same(await seqs(`entity_id=${a}&end_date=${at(e2)}`), [1], 'with entity_id: only that token\'s events up to end_date');
  t.same(await seqs(`end_date=${e1.created_at.slice(0, 4)}-01-01`), [], 'a date-only end_date (midnight of New Year) is before the events');
  const page1 = await logs(`end_date=${at(e2)}&size=1`);
  t.same(page1.data.map((e) => e.seq), [2]);
  t.not(page1.next, null);
  const page2 = await logs(`end_date=${at(e2)}&size=1&start=${page1.next}`);
  t.same(page2.data.map((e) => e.seq), [1], 'the next page keeps the filter');
  const bad = await s.call('GET', '/logs?end_date=tomorrow', { key: MGMT });
  t.equal(bad.status, 400);
  t.equal(bad.body.code, 'validation_failed');
  t.ok(bad.body.errors?.end_date, 'the error names end_date');
}

t.test('GET /logs end_date: embedded store', (t) => endDate(t));
t.test('GET /logs end_date: redis store', { skip: redisSkip() }, async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  await endDate(t, redis);
});

t.test('POST /detokenize is rate limited on the counters of GET /tokens/{id}', async (t) => {
  const config = baseConfig() as Record<string, unknown> & { tenants: Array<Record<string, unknown>> };
  config.rate_limits = { enabled: true };
  // private_key is the rule a private key's GET /tokens/{id} counts on; listing and creating at
  // one point each would refuse a second /detokenize if it counted there.
  config.tenants[0]!.custom_rate_limits = {
    private_key: { points: 4, duration_seconds: 600 },
    listing_tokens: { points: 1, duration_seconds: 600 },
    creating_tokens: { points: 1, duration_seconds: 600 },
  };
  const s = await startTestService(t, { config });
  const number = randomCard();
  const created = await s.call('POST', '/tokens', { body: { type: 'card', data: { number, expiration_month: 1, expiration_year: 2033 } } });
  t.equal(created.status, 201, created.text);
  t.equal(created.headers.get('ratelimit-remaining'), '0', 'the create took the one creating point (and one of private_key)');
  const id = created.body.id as string;
  const detokenize = () => s.call('POST', '/detokenize', { body: { pan: `{{ ${id} | json: '$.number' }}` } });

  const read = await s.call('GET', `/tokens/${id}`);
  t.equal(read.status, 200);
  t.equal(read.headers.get('ratelimit-remaining'), '2', 'a read: private_key 2 of 4 left');
  const first = await detokenize();
  t.equal(first.status, 200, first.text);
  t.same(first.body, { pan: number });
  t.equal(first.headers.get('ratelimit-limit'), '4', 'counted on private_key (4 points), not on listing or creating (1)');
  t.equal(first.headers.get('ratelimit-remaining'), '1');
  const second = await detokenize();
  t.equal(second.status, 200, 'a second /detokenize: the listing and creating rules (1 point each) do not count it');
  t.equal(second.headers.get('ratelimit-remaining'), '0');
  const over = await detokenize();
  t.equal(over.status, 429);
  t.equal(over.body.code, 'rate_limited');
  t.match(over.body.detail, /"private_key"/, 'the rule that refused is named');
  t.ok(Number(over.headers.get('retry-after')) >= 1, 'Retry-After');
  t.notOk(over.text.includes(number), 'no value in the refusal');
  const readOver = await s.call('GET', `/tokens/${id}`);
  t.equal(readOver.status, 429, 'GET /tokens/{id} is refused on the same counter');
  t.equal(readOver.body.code, 'rate_limited');
});
