/**
 * Issue 28: asynchronous reactor results on the shared stores (Redis, PostgreSQL) over HTTP: a
 * result holding a card is read back by the asking application, and the store holds it sealed
 * (no card in any Redis value or reactor_results row). The port itself: the store contract.
 */
import t, { type Test } from 'tap';
import { Redis } from 'ioredis';
import pg from 'pg';
import { postgresSkip, startPostgres } from '../helpers/postgres.js';
import { redisSkip, startRedis } from '../helpers/redis.js';
import { randomCard } from '../helpers/secrets.js';
import { startTestService, type StartTestOptions, type TestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

const TENANT = '28282828-2828-4828-8828-282828282828';
const CALLER = 'async_caller_key_aaaaaaaaaaaaaaaaaaa';
const OTHER = 'async_other_app_key_bbbbbbbbbbbbbbbb';

const config = {
  server: { host: '127.0.0.1', port: 0 },
  log: { level: 'info' },
  rate_limits: { enabled: false },
  tenants: [{
    id: TENANT,
    name: 'async',
    applications: [
      { id: '28282828-aaaa-4000-8000-000000000001', name: 'caller', type: 'private', keys: [CALLER], permissions: ['reactor:invoke'] },
      { id: '28282828-aaaa-4000-8000-000000000002', name: 'other', type: 'private', keys: [OTHER], permissions: ['reactor:invoke'] },
    ],
    reactors: [{ id: 'echo', name: 'echo', code: 'module.exports = async function (req) { return { raw: req.args }; };' }],
  }],
};

/** Calls echo with a card in the background and reads the result back; returns the card. */
async function roundTrip(t: Test, opts: StartTestOptions): Promise<{ s: TestService; card: string }> {
  const s = await startTestService(t, { ...opts, config });
  const card = randomCard();
  const started = await s.call('POST', '/reactors/echo/react-async', { key: CALLER, body: { args: { pan: card } } });
  t.equal(started.status, 202, started.text);
  const id = started.body.asyncReactorRequestId as string;
  const done = await waitFor(async () => {
    const r = await s.call('GET', `/reactors/echo/results/${id}`, { key: CALLER });
    return r.status === 202 ? undefined : r;
  }, { timeoutMs: 60_000, intervalMs: 50, what: 'the result' });
  t.equal(done.status, 200, done.text);
  t.same(done.body, { raw: { pan: card }, tokens: null });
  const other = await s.call('GET', `/reactors/echo/results/${id}`, { key: OTHER });
  t.equal(other.body?.code, 'reactor_result_not_found', 'another application: 404');
  return { s, card };
}

t.test('Redis: the result round-trips; no Redis value holds the card', { skip: redisSkip() }, async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const { card } = await roundTrip(t, { redis });
  const client = new Redis(redis.url);
  t.teardown(() => client.disconnect());
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await client.scan(cursor, 'MATCH', `${redis.prefix}*`, 'COUNT', '1000');
    cursor = next;
    keys.push(...batch);
  } while (cursor !== '0');
  const results = keys.filter((k) => k.includes(':rr:'));
  t.equal(results.length, 1, 'one result key');
  t.ok(Number(await client.pttl(results[0]!)) > 0, 'it expires by itself');
  for (const k of keys) {
    const type = await client.type(k);
    const value = type === 'string' ? await client.get(k) : type === 'hash' ? JSON.stringify(await client.hgetall(k)) : '';
    t.notOk((value ?? '').includes(card), `${k.slice(redis.prefix.length)}: no card`);
  }
});

t.test('PostgreSQL: the result round-trips; no reactor_results row holds the card', { skip: postgresSkip() }, async (t) => {
  const server = await startPostgres();
  t.teardown(() => server.stop());
  const postgres = await server.database(t);
  const { card } = await roundTrip(t, { postgres });
  const client = new pg.Client(postgres.url);
  await client.connect();
  t.teardown(() => client.end());
  const rows = (await client.query<{ sealed: string }>('SELECT sealed FROM tokenproxy.reactor_results')).rows;
  t.equal(rows.length, 1, 'one row');
  t.notOk(rows.some((r) => r.sealed.includes(card)), 'sealed: no card');
});
