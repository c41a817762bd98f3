/**
 * PostgreSQL going away under a running RateLimitService (issue 24), as redis-down.test.ts does
 * for Redis: `reject` answers 503 fast, `allow` serves (counting on the instance) and logs once per
 * interval, naming only the error's code; a table locked by another transaction (a PostgreSQL
 * that does not answer) never holds a check past timeout_ms; a server that accepts and never
 * answers fails the first checks within timeout_ms too; when PostgreSQL is back the same service
 * enforces shared limits again. A cluster of this file's own (it is killed and restarted).
 */
import t from 'tap';
import { createServer, type Socket } from 'node:net';
import pg from 'pg';
import { postgresForFile } from '../helpers/postgres.js';
import { RateLimitService, type RateLimitConfig } from '../../src/rate-limit/limiter.js';
import { waitFor } from '../helpers/wait.js';
import { captureLog, expect429, loggedTimeout, rejection, tenantWith, timed, type Subject } from './fixtures.js';

const TIMEOUT_MS = 200;
/** timeout_ms plus a generous margin for a loaded machine (as redis-down.test.ts). */
const ANSWER_BOUND_MS = TIMEOUT_MS + 2_000;

/** A pool as the token store opens it (bounded connect and query waits). */
function storeLikePool(t: { teardown(fn: () => unknown): void }, url: string): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max: 10, connectionTimeoutMillis: 2000, query_timeout: 5000 });
  pool.on('error', () => {}); // idle connections of a killed server
  t.teardown(() => pool.end().catch(() => {}));
  return pool;
}

const server = await postgresForFile(t, { killable: true });
if (server) {
  const cfg = (on_store_error: 'reject' | 'allow'): RateLimitConfig => ({
    enabled: true, store: 'postgres', key_prefix: 'tp:rl:', on_store_error, timeout_ms: TIMEOUT_MS,
  });

  t.test('killed, then restarted', async (t) => {
    const db = await server.database(t);
    const rejectLog = captureLog();
    const allowLog = captureLog();
    const rejectPool = storeLikePool(t, db.url);
    await rejectPool.query('CREATE SCHEMA tokenproxy');
    const rejecting = await RateLimitService.create(cfg('reject'), { log: rejectLog.log, postgres: rejectPool });
    t.teardown(() => rejecting.close());
    const allowing = await RateLimitService.create(cfg('allow'), { log: allowLog.log, postgres: storeLikePool(t, db.url) });
    t.teardown(() => allowing.close());
    const tenant = tenantWith({ private_key: { points: 3, duration_seconds: 1 } });
    const s = (key: string): Subject => ({ tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: key, keyKind: 'private' });

    // The table and the pools' first connections, as startService waits for them: on a loaded
    // machine they took longer than one check's 200 ms (a full run refused the first check).
    await Promise.all([rejecting.ready(), allowing.ready()]);
    await rejecting.check(s('r'));
    await allowing.check(s('a'));

    await server.kill();

    // reject: 503 rate_limit_unavailable, fast, every time, no crash.
    for (let i = 0; i < 3; i++) {
      const [e, ms] = await timed(() => rejection(rejecting.check(s('r'))));
      t.match(e, { code: 'rate_limit_unavailable', status: 503 }, 'reject mode: 503');
      t.ok(ms < ANSWER_BOUND_MS, `reject mode answered in ${ms} ms`);
    }

    // allow: served, counted per instance (the insurance limiter), so a flood is still stopped.
    const insured = s('a2');
    for (let i = 0; i < 3; i++) {
      const [r, ms] = await timed(() => allowing.check(insured));
      t.match(r, { headers: { 'RateLimit-Limit': '3' } }, 'allow mode: admitted');
      t.ok(ms < ANSWER_BOUND_MS, `allow mode answered in ${ms} ms`);
    }
    await expect429(t, allowing.check(insured), 3, 1, 'allow mode: per-instance limit');

    const logged = allowLog.lines.filter((l) => l.event === 'rate_limit_store_error');
    t.equal(logged.length, 1, 'logged once per interval, not per request');
    t.match(logged[0], { level: 40, on_store_error: 'allow', failures: 1 });
    // pg's own messages can quote a statement's values: only the code leaves (ECONNREFUSED, or a
    // connection cut by the kill).
    for (const line of [...logged, ...rejectLog.lines.filter((l) => l.event === 'rate_limit_store_error')]) {
      t.match(line.error, /^PostgreSQL [A-Za-z0-9_]+$/, `the error is named by its code: ${String(line.error)}`);
    }
    t.equal(allowing.stats().storeFailures, 4, 'every failure counted');
    t.equal(rejecting.stats().storeFailures, 3);
    t.equal(rejectLog.lines.filter((l) => l.event === 'rate_limit_store_error').length, 1);

    await server.restart();

    // Same service objects: they recover on their own once the pool connects again. Polled on a
    // counter of its own: a poll that timed out (timeout_ms) while its query waited for a new
    // connection still counts once that query runs, so it must not be the counter counted below.
    await waitFor(() => rejecting.check(s('reconnect')).then(() => true, () => false), { timeoutMs: 15_000, intervalMs: 100, what: 'reject mode counts on PostgreSQL again' });
    t.pass('reject mode recovered without a restart');
    for (let i = 1; i <= 3; i++) t.equal((await rejecting.check(s('after'))).headers['RateLimit-Remaining'], String(3 - i), `after the restart, check ${i} admitted`);
    await expect429(t, rejecting.check(s('after')), 3, 1, 'limits enforced again');
    t.ok(rejectLog.lines.some((l) => l.event === 'rate_limit_store_recovered'), 'recovery logged');

    // An allow-mode check succeeds with PostgreSQL down too (the insurance limiter answers), so
    // success says nothing: it is back once a check adds no store failure.
    await waitFor(async () => {
      const failures = allowing.stats().storeFailures;
      await allowing.check(s('probe')).catch(() => {});
      return allowing.stats().storeFailures === failures;
    }, { timeoutMs: 15_000, intervalMs: 100, what: 'allow mode counts on PostgreSQL again' });
    const before = allowing.stats().storeFailures;
    await allowing.check(s('shared'));
    await rejecting.check(s('shared'));
    await rejecting.check(s('shared'));
    await expect429(t, allowing.check(s('shared')), 3, 1, 'allow mode shares counters again');
    t.equal(allowing.stats().storeFailures, before, 'no failures after recovery');
    // The crash emptied the UNLOGGED table (PostgreSQL resets it in crash recovery): the counts
    // above started from zero in a table that still exists.
    const rows = await rejectPool.query<{ key: string }>('SELECT key FROM tokenproxy.rate_limits');
    t.notOk(rows.rows.some((r) => r.key.endsWith(':r')), 'the counter from before the crash is gone');
    t.ok(rows.rows.some((r) => r.key.endsWith(':shared')), 'the counters since are rows of the table');
  });

  t.test('a locked table (PostgreSQL not answering) never holds a check past timeout_ms', async (t) => {
    const db = await server.database(t);
    const pool = storeLikePool(t, db.url);
    await pool.query('CREATE SCHEMA tokenproxy');
    const { log, lines } = captureLog();
    const rejecting = await RateLimitService.create(cfg('reject'), { log, postgres: pool });
    t.teardown(() => rejecting.close());
    const allowing = await RateLimitService.create(cfg('allow'), { log, postgres: storeLikePool(t, db.url) });
    t.teardown(() => allowing.close());
    const tenant = tenantWith({ private_key: { points: 100, duration_seconds: 10 } });
    const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' };
    await Promise.all([rejecting.ready(), allowing.ready()]);
    await rejecting.check(s);
    await allowing.check(s);

    // Another session holds the table until it commits, which the test does once the checks have
    // answered: an answer before that can only come from timeout_ms.
    const locker = new pg.Client(db.url);
    await locker.connect();
    t.teardown(() => locker.end().catch(() => {}));
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE tokenproxy.rate_limits IN ACCESS EXCLUSIVE MODE');
    const [e, ms1] = await timed(() => rejection(rejecting.check(s)));
    t.match(e, { code: 'rate_limit_unavailable' });
    t.ok(ms1 >= TIMEOUT_MS - 20 && ms1 < ANSWER_BOUND_MS, `reject mode gave up after ${ms1} ms`);
    t.ok(loggedTimeout(lines, 'reject'), 'ended by timeout_ms, as logged');
    const [r, ms2] = await timed(() => allowing.check(s));
    t.match(r, { headers: { 'RateLimit-Limit': '100' } });
    t.ok(ms2 < ANSWER_BOUND_MS, `allow mode admitted after ${ms2} ms`);
    t.ok(loggedTimeout(lines, 'allow'), 'allow mode: admitted on the instance once timeout_ms passed, as logged');
    await locker.query('COMMIT');
    // The updates that waited for the lock are woken by the commit but run in their own
    // backends; a check sent now can reach the row before one of them does. Wait until no other
    // session of this database is still running a statement.
    await waitFor(async () => {
      const r = await locker.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND state = 'active'");
      return r.rows[0].n === 0;
    }, { timeoutMs: 10_000, intervalMs: 20, what: 'the updates that waited for the lock have run' });

    const back = await waitFor(() => rejecting.check(s).then((d) => d, () => undefined), { timeoutMs: 10_000, intervalMs: 100, what: 'a check admitted after the lock was released' });
    t.equal(back.headers['RateLimit-Limit'], '100', 'back once the lock is gone');
    // The updates that waited for the lock ran when it went: they count too.
    t.ok(Number(back.headers['RateLimit-Remaining']) <= 95, `counted with the earlier checks (${back.headers['RateLimit-Remaining']} left)`);
  });

  t.test('a server that accepts but never answers: the first checks time out too', async (t) => {
    const sockets = new Set<Socket>();
    const silent = createServer((sock) => {
      sockets.add(sock);
      sock.on('error', () => {});
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    t.teardown(() => {
      for (const sock of sockets) sock.destroy();
      silent.close();
    });
    const addr = silent.address();
    const port = typeof addr === 'object' && addr ? addr.port : 0;
    const pool = storeLikePool(t, `postgres://tp@127.0.0.1:${port}/nothing`);
    const { log, lines } = captureLog();
    const rejecting = await RateLimitService.create(cfg('reject'), { log, postgres: pool });
    t.teardown(() => rejecting.close());
    const allowing = await RateLimitService.create(cfg('allow'), { log, postgres: pool });
    t.teardown(() => allowing.close());
    const s: Subject = { tenant: tenantWith(), route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' };
    const [e, ms] = await timed(() => rejection(rejecting.check(s)));
    t.match(e, { code: 'rate_limit_unavailable' });
    t.ok(ms >= TIMEOUT_MS - 20 && ms < ANSWER_BOUND_MS, `gave up after ${ms} ms`);
    t.ok(loggedTimeout(lines, 'reject'), 'ended by timeout_ms, as logged');
    const [r] = await timed(() => allowing.check(s));
    t.match(r, { headers: { 'RateLimit-Limit': '1000' } }, 'allow mode: admitted on the instance');
  });
}
