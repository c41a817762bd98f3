/**
 * README "Audit trail" (issue 30, README promises no test exercised, item 1): "The event is written
 * before the value leaves: when the store cannot write it, the request fails with `503`."
 *
 * The append is made to fail for real in the store the service runs on. Embedded: a trigger,
 * created through a second connection to the service's SQLite file, aborts every insert into
 * `audit_events` (the service's writer thread re-prepares its statements on the schema change and
 * its insert fails as a disk error would). Redis: the tenant's audit list is moved aside and a
 * string put in its place, so the append script's RPUSH fails (WRONGTYPE). Token reads that append nothing keep working; every route that reveals or
 * uses a value answers 503 store_unavailable with no value in the answer, the destination of an
 * outbound use receives nothing, and the trail holds no event of the refused requests.
 */
import t, { type Test } from 'tap';
import { Redis } from 'ioredis';
import { withStoreDb } from '../helpers/store-file.js';
import { randomCard, randomCvc, cvcPattern } from '../helpers/secrets.js';
import { redisSkip, startRedis } from '../helpers/redis.js';
import { KEYS, TENANT_A, baseConfig, startTestService, type TestService } from '../helpers/service.js';
import { startUpstream, type Upstream } from '../helpers/upstream.js';

const MGMT = 'promises_audit_mgmt_key_aaaaaaaaaaa';
const USER = 'promises_audit_user_key_bbbbbbbbbbb';

async function auditFailure(t: Test, up: Upstream, start: (t: Test) => Promise<{ s: TestService; break(): Promise<void>; repair(): Promise<void> }>): Promise<void> {
  const { s, break: breakAppends, repair: repairAppends } = await start(t);

  const number = randomCard();
  const cvc = randomCvc();
  const created = await s.call('POST', '/tokens', { body: { type: 'card', data: { number, expiration_month: 7, expiration_year: 2031, cvc } } });
  t.equal(created.status, 201, created.text);
  const id = created.body.id as string;
  const before = await s.call('GET', `/tokens/${id}`);
  t.equal(before.status, 200, 'a reveal works while the store writes its event');
  t.equal(before.body.data.number, number);

  await breakAppends();
  const refused = (what: string, r: { status: number; body: any; text: string }, wrapped = false) => {
    const problem = wrapped ? r.body?.proxy_error : r.body;
    t.equal(r.status, 503, `${what}: 503`);
    t.equal(problem?.code, 'store_unavailable', `${what}: store_unavailable`);
    t.notOk(r.text.includes(number), `${what}: the card number is not in the answer`);
    t.notMatch(r.text, cvcPattern(cvc), `${what}: no cvc`);
  };

  refused('GET /tokens/{id} (reveal)', await s.call('GET', `/tokens/${id}`));
  refused('GET /tokens (a page under reveal)', await s.call('GET', '/tokens?type=card'));
  refused('POST /tokens/search (reveal)', await s.call('POST', '/tokens/search', { body: { query: `id:${id}` } }));
  refused('POST /detokenize', await s.call('POST', '/detokenize', { body: { pan: `{{ ${id} | json: '$.number' }}` } }));
  refused('PATCH /tokens/{id} (reveal)', await s.call('PATCH', `/tokens/${id}`, {
    raw: JSON.stringify({ metadata: { k: 'v' } }), headers: { 'content-type': 'application/merge-patch+json' },
  }));
  const outbound = await s.call('POST', '/proxy/charge', {
    key: USER,
    headers: { 'svc-proxy-url': up.url, 'content-type': 'application/json' },
    raw: JSON.stringify({ pan: `{{ ${id} | json: '$.number' }}`, cvc: `{{ ${id} | json: '$.cvc' }}` }),
  });
  refused('outbound proxy (a use)', outbound, true);
  t.equal(up.received.length, 0, 'the destination received nothing');

  // Reads that append nothing are served: only the audit write failed.
  const masked = await s.call('GET', `/tokens/${id}`, { key: KEYS.masked });
  t.equal(masked.status, 200, 'a masked read (no event) is served');
  t.equal(masked.body.data.number, `XXXXXXXXXXXX${number.slice(-4)}`);
  t.notOk(s.logs().includes(number), 'no card number in the log');

  await repairAppends();
  const after = await s.call('GET', `/tokens/${id}`);
  t.equal(after.status, 200, 'reveals work again once the store writes events');
  t.equal(after.body.data.number, number);
  const logs = await s.call('GET', '/logs?size=100', { key: MGMT });
  t.equal(logs.status, 200, logs.text);
  t.same((logs.body.data as Array<{ operation: string; request_id: string }>).map((e) => e.operation), ['token.reveal', 'token.reveal'],
    'the trail holds the two served reveals and no event of a refused request');
  t.same(logs.body.data.map((e: { seq: number }) => e.seq), [2, 1], 'an unbroken chain: the refused appends took no place in it');
  t.equal(logs.body.data[0].request_id, after.headers.get('svc-trace-id'));
}

async function setup(t: Test): Promise<{ config: ReturnType<typeof baseConfig>; up: Upstream }> {
  const up = await startUpstream(t);
  const config = baseConfig();
  const tenant = (config as { tenants: Array<Record<string, unknown> & { applications: unknown[] }> }).tenants[0]!;
  tenant.applications.push(
    { id: 'aaaaaaaa-0000-4000-8000-0000000000a1', name: 'mgmt', type: 'management', keys: [MGMT], permissions: ['log:read'] },
    { id: 'aaaaaaaa-0000-4000-8000-0000000000a2', name: 'user', type: 'private', keys: [USER], permissions: ['proxy:invoke'],
      rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: ['token:use', 'token:read'] }] },
  );
  tenant.outbound = { allowed_destinations: [up.url] };
  return { config, up };
}

t.test('embedded store: a trigger aborts every audit insert', async (t) => {
  const { config, up } = await setup(t);
  await auditFailure(t, up, async (t) => {
    const s = await startTestService(t, { config });
    return {
      s,
      break: async () =>
        void withStoreDb(s, (db) => db.exec("CREATE TRIGGER promises_no_audit BEFORE INSERT ON audit_events BEGIN SELECT RAISE(ABORT, 'audit append refused by the test'); END")),
      repair: async () => void withStoreDb(s, (db) => db.exec('DROP TRIGGER promises_no_audit')),
    };
  });
});

t.test('redis store: the audit list is replaced by a string (every append fails with WRONGTYPE)', { skip: redisSkip() }, async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const { config, up } = await setup(t);
  const client = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await client.connect();
  t.teardown(() => client.disconnect());
  const list = `${redis.prefix}t:{${TENANT_A}}:audit`;
  await auditFailure(t, up, async (t) => {
    const s = await startTestService(t, { config, redis });
    return {
      s,
      break: async () => {
        t.equal(await client.type(list), 'list', 'the audit list is where the README says');
        await client.rename(list, `${list}:aside`);
        await client.set(list, 'not a list');
      },
      repair: async () => {
        await client.del(list);
        await client.rename(`${list}:aside`, list);
      },
    };
  });
});
