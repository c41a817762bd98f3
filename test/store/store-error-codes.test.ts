/**
 * Store errors tell their cause: every StoreUnavailableError carries the code the store or its
 * driver gave (a SQLSTATE, a Redis error reply's prefix, a socket code, `timeout`) and its class
 * (input | outage | timeout | auth), and the log lines of a failed request write both, with the
 * store's message, never a value. On real stores: a PostgreSQL unique index of the operator's own
 * (23505, input), a wrong PostgreSQL password (28P01, auth), a Redis out of memory (OOM, outage)
 * and a Redis that refuses connections (ECONNREFUSED, outage). The frozen and killed PostgreSQL
 * cases (timeout, ECONNREFUSED) are in postgres-frozen.test.ts.
 */
import t from 'tap';
import pg from 'pg';
import { Redis } from 'ioredis';
import { createLogger, errorFields } from '../../src/log.js';
import { PostgresStore } from '../../src/store/postgres/index.js';
import { classify, StoreUnavailableError } from '../../src/store/unavailable.js';
import { postgresForFile } from '../helpers/postgres.js';
import { redisForFile } from '../helpers/redis.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { randomMarker } from '../helpers/secrets.js';
import { waitFor } from '../helpers/wait.js';

t.test('classify: SQLSTATEs, Redis reply prefixes, socket and SQLite codes', async (t) => {
  const table: Record<string, string> = {
    '23505': 'input', '23514': 'input', '22021': 'input', '22P05': 'input', '54000': 'input',
    '57014': 'timeout', '55P03': 'timeout', '25P03': 'timeout', 'timeout': 'timeout', 'ETIMEDOUT': 'timeout', 'SQLITE_BUSY': 'timeout', 'BUSY': 'timeout',
    '28P01': 'auth', '28000': 'auth', '42501': 'auth', 'NOAUTH': 'auth', 'WRONGPASS': 'auth', 'NOPERM': 'auth', 'DEPTH_ZERO_SELF_SIGNED_CERT': 'auth', 'ERR_TLS_CERT_ALTNAME_INVALID': 'auth',
    '08006': 'outage', '57P01': 'outage', '53300': 'outage', '53100': 'outage', '3D000': 'outage', '42P01': 'outage', 'XX000': 'outage',
    'ECONNREFUSED': 'outage', 'ECONNRESET': 'outage', 'connection_closed': 'outage', 'READONLY': 'outage', 'OOM': 'outage', 'LOADING': 'outage', 'NOSCRIPT': 'outage', 'CLUSTERDOWN': 'outage',
    'SQLITE_FULL': 'outage', 'SQLITE_IOERR_WRITE': 'outage', 'SQLITE_CORRUPT': 'outage', 'SQLITE_CONSTRAINT_UNIQUE': 'input', 'SQLITE_TOOBIG': 'input',
  };
  for (const [code, expected] of Object.entries(table)) t.equal(classify(code), expected, code);
  t.equal(classify(undefined), 'outage', 'no code: an outage (the message says what was found)');
});

t.test('StoreUnavailableError: the code given, or the cause\'s; never free text', async (t) => {
  t.match(new StoreUnavailableError('m', { code: '57P01' }), { code: '57P01', class: 'outage' });
  t.match(new StoreUnavailableError('m', { cause: Object.assign(new Error('x'), { code: 'SQLITE_FULL' }) }), { code: 'SQLITE_FULL', class: 'outage' });
  t.match(new StoreUnavailableError('m', { code: 'timeout', class: 'timeout' }), { code: 'timeout', class: 'timeout' });
  const prose = new StoreUnavailableError('m', { cause: Object.assign(new Error('x'), { code: 'a value: 4242' }) });
  t.equal(prose.code, undefined, 'a code that is not a code is not kept');
  t.equal(prose.class, 'outage');
});

t.test('errorFields: a store error\'s code, class and message; never another error\'s message', async (t) => {
  const err = new StoreUnavailableError('the PostgreSQL store failed (23505)', { code: '23505' });
  t.same(errorFields(err), { type: 'StoreUnavailableError', code: '23505', class: 'input', message: 'the PostgreSQL store failed (23505)' });
  const secret = randomMarker('value');
  t.same(errorFields(Object.assign(new Error(`invalid input: "${secret}"`), { code: 'ECONNRESET' })), { type: 'Error', code: 'ECONNRESET' });
  t.same(errorFields(new TypeError(secret)), { type: 'TypeError' });
  t.equal(errorFields('not an error'), undefined);
});

/** The cause of every `request failed` line logged after `from` characters. */
function failedCauses(s: TestService, from: number): Array<Record<string, unknown>> {
  return s.logs().slice(from).split('\n').filter((l) => l.includes('"msg":"request failed"')).map((l) => (JSON.parse(l) as { cause: Record<string, unknown> }).cause);
}

t.test('PostgreSQL', async (t) => {
  const server = await postgresForFile(t);
  if (!server) return;

  t.test('a unique index of the operator\'s own: 23505, input, the value in no log line', async (t) => {
    const db = await server.database(t);
    const s = await startTestService(t, { postgres: db });
    const client = new pg.Client(db.url);
    await client.connect();
    t.teardown(() => client.end());
    await client.query("CREATE UNIQUE INDEX tokens_by_ref ON tokenproxy.tokens ((metadata->>'ref'))");
    const ref = randomMarker('ref');
    const value = randomMarker('value');
    t.equal((await s.call('POST', '/tokens', { body: { type: 'token', data: `${value}-1`, metadata: { ref } } })).status, 201);
    const from = s.logs().length;
    const r = await s.call('POST', '/tokens', { body: { type: 'token', data: `${value}-2`, metadata: { ref } } });
    t.equal(r.status, 503, r.text);
    t.equal(r.body?.code, 'store_unavailable');
    t.same(failedCauses(s, from).map(({ stack, ...rest }) => rest), [
      { type: 'StoreUnavailableError', code: '23505', class: 'input', message: 'the PostgreSQL store failed (23505)' },
    ], 'the request failed line: code, class, message');
    t.notMatch(s.logs(), ref, 'not the key the index refused');
    t.notMatch(s.logs(), value, 'not the value');
  });

  t.test('a wrong password: 28P01, auth', { skip: server.checksPasswords ? false : 'the given server lets a wrong password in (trust)' }, async (t) => {
    const url = new URL(server.adminUrl);
    url.password = 'not-the-password';
    const err = await PostgresStore.connect({ url: url.toString(), log: createLogger('silent') }).then(() => null, (e: unknown) => e);
    t.ok(err instanceof StoreUnavailableError, 'StoreUnavailableError');
    t.match(err, { code: '28P01', class: 'auth' });
  });
});

t.test('Redis', async (t) => {
  const redis = await redisForFile(t, { killable: true });
  if (!redis) return;
  const s = await startTestService(t, { redis });
  const admin = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 0 });
  t.teardown(() => admin.disconnect());
  await admin.connect();
  const made = await s.call('POST', '/tokenize', { body: { v: randomMarker('before') } });
  t.equal(made.status, 200);

  t.test('out of memory: OOM, outage', async (t) => {
    // This file's own server (killable): nobody else's writes are refused.
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await admin.config('SET', 'maxmemory', '1');
    t.teardown(() => admin.config('SET', 'maxmemory', '0'));
    const value = randomMarker('value');
    const from = s.logs().length;
    const r = await s.call('POST', '/tokenize', { body: { v: value } });
    t.equal(r.status, 503, r.text);
    t.equal(r.body?.code, 'store_unavailable');
    t.same(failedCauses(s, from).map(({ stack, ...rest }) => rest), [
      { type: 'StoreUnavailableError', code: 'OOM', class: 'outage', message: 'the Redis token store refused the command (OOM)' },
    ], 'the request failed line: code, class, message');
    t.notMatch(s.logs(), value, 'not the value');
    await admin.config('SET', 'maxmemory', '0');
    t.equal((await s.call('POST', '/tokenize', { body: { v: randomMarker('after') } })).status, 200, 'writes again once Redis has memory');
  });

  t.test('refusing connections: ECONNREFUSED, outage', async (t) => {
    await redis.kill();
    let restarted = false;
    t.teardown(() => (restarted ? undefined : redis.restart().catch(() => {})));
    const from = s.logs().length;
    const r = await s.call('GET', `/tokens/${made.body.v}`);
    t.equal(r.status, 503, r.text);
    const causes = failedCauses(s, from);
    t.equal(causes.length, 1, 'one request failed line');
    t.match(causes[0], { type: 'StoreUnavailableError', code: 'ECONNREFUSED', class: 'outage', message: 'the Redis token store is unavailable (ECONNREFUSED)' });
    const connectionLine = s.logs().split('\n').find((l) => l.includes('"msg":"redis token store connection error"'));
    t.match(connectionLine && JSON.parse(connectionLine), { code: /^(ECONNREFUSED|ECONNRESET)$/, class: 'outage' }, 'the connection error line: code and class');
    await redis.restart();
    restarted = true;
    await waitFor(async () => (await s.call('GET', `/tokens/${made.body.v}`)).status === 200, { timeoutMs: 30_000, intervalMs: 100, what: 'the service reading again' });
  });
});
