/**
 * RateLimitService on a real PostgreSQL (issue 24, `rate_limits.store: postgres`): counters shared
 * by several instances, block semantics, windows in milliseconds, the table (its name, UNLOGGED,
 * the row keys), the sweep of expired rows. Each test gets a database of its own. (PostgreSQL going
 * down: postgres-down.test.ts.)
 */
import t, { type Test } from 'tap';
import pg from 'pg';
import { postgresForFile } from '../helpers/postgres.js';
import { RateLimitService, type RateLimitConfig } from '../../src/rate-limit/limiter.js';
import { PostgresCounters } from '../../src/rate-limit/postgres.js';
import { ServiceError } from '../../src/errors.js';
import { captureLog, expect429, onTime, outcome, rejection, replay, sleep, tenantWith, type Subject } from './fixtures.js';

const server = await postgresForFile(t);
if (server) {
  const cfg: RateLimitConfig = { enabled: true, store: 'postgres', key_prefix: 'tp:rl:', on_store_error: 'reject', timeout_ms: 1000 };
  const { log, lines } = captureLog();

  /**
   * A database of the test's own with the token store's schema (the store creates it at connect;
   * here only the schema matters) and a pool like the store's.
   */
  const database = async (t: Test): Promise<{ url: string; pool: pg.Pool; sql: (text: string, values?: unknown[]) => Promise<pg.QueryResult> }> => {
    const db = await server.database(t);
    const pool = new pg.Pool({ connectionString: db.url, max: 10, connectionTimeoutMillis: 2000, query_timeout: 5000 });
    pool.on('error', () => {});
    t.teardown(() => pool.end());
    await pool.query('CREATE SCHEMA tokenproxy');
    return { url: db.url, pool, sql: (text, values) => pool.query(text, values) };
  };
  const service = async (t: Test, pool: pg.Pool, extra: Partial<RateLimitConfig> = {}) => {
    const s = await RateLimitService.create({ ...cfg, ...extra }, { log, postgres: pool });
    t.teardown(() => s.close());
    return s;
  };

  t.test('two instances on one database admit exactly N, not 2N', async (t) => {
    const { url, pool } = await database(t);
    // Each instance its own pool, as two processes have.
    const other = new pg.Pool({ connectionString: url, max: 10 });
    t.teardown(() => other.end());
    const a = await service(t, pool);
    const b = await service(t, other);
    const tenant = tenantWith({ private_key: { points: 4, duration_seconds: 10 } });
    const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private' };
    let admitted = 0;
    for (let i = 0; i < 10; i++) {
      try {
        await (i % 2 === 0 ? a : b).check(s);
        admitted++;
      } catch (e) {
        if (!(e instanceof ServiceError) || e.code !== 'rate_limited') throw e;
      }
    }
    t.equal(admitted, 4, 'sequential, alternating');

    // Concurrent: 30 checks in flight at once across both instances (the first ones also race to
    // create nothing: the table exists by now).
    const s2: Subject = { ...s, apiKeyId: 'k2' };
    const results = await Promise.allSettled(Array.from({ length: 30 }, (_, i) => (i % 2 ? a : b).check(s2)));
    t.equal(results.filter((r) => r.status === 'fulfilled').length, 4, 'concurrent');
    for (const r of results) if (r.status === 'rejected') t.equal((r.reason as ServiceError).code, 'rate_limited');
  });

  t.test('ten instances starting at once create the table once, none fails', async (t) => {
    const { pool, sql } = await database(t);
    const services = await Promise.all(Array.from({ length: 10 }, () => service(t, pool)));
    const tenant = tenantWith({ private_key: { points: 5, duration_seconds: 10 } });
    const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' };
    const results = await Promise.allSettled(services.map((x) => x.check(s)));
    const codes = results.map((r) => (r.status === 'fulfilled' ? 'ok' : (r.reason as ServiceError).code));
    t.same(codes.filter((c) => c === 'ok').length, 5, `five admitted, the rest rate_limited: ${codes.join(' ')}`);
    t.ok(codes.every((c) => c === 'ok' || c === 'rate_limited'), 'no store failure');
    t.equal(services.reduce((n, x) => n + x.stats().storeFailures, 0), 0);
    const tables = await sql(`SELECT relname, relpersistence FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'tokenproxy' AND c.relkind = 'r'`);
    t.same(tables.rows, [{ relname: 'rate_limits', relpersistence: 'u' }], 'one table, tokenproxy.rate_limits, UNLOGGED');
  });

  // The scenarios below need a few checks inside a 1 s window (and one inside a 2 s block); onTime
  // runs one again with a fresh tenant when a stall on a loaded machine broke that (issue 30).
  t.test('throttle on PostgreSQL: headers, 429, recovery after the window', async (t) => {
    const { pool } = await database(t);
    const a = await service(t, pool);
    const b = await service(t, pool);
    await onTime(t, async () => {
      const tenant = tenantWith({ creating_tokens: { points: 2, duration_seconds: 1 } });
      const s: Subject = { tenant, route: 'tokenize', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private' };
      const opened = Date.now();
      const burst = [await outcome(a.check(s))];
      const firstSeen = Date.now();
      burst.push(await outcome(b.check(s)), await outcome(a.check(s)));
      const took = Date.now() - opened;
      if (took >= 1000) return `the burst of 3 checks took ${took} ms, not within the 1 s window`;
      t.same('decision' in burst[0]! && burst[0].decision.headers, { 'RateLimit-Limit': '2', 'RateLimit-Remaining': '1', 'RateLimit-Reset': '1' });
      t.same('decision' in burst[1]! && burst[1].decision.headers['RateLimit-Remaining'], '0');
      await expect429(t, replay(burst[2]!), 2, 1);
      await sleep(1100 - (Date.now() - firstSeen));
      t.equal((await b.check(s)).headers['RateLimit-Remaining'], '1', 'next window');
      return undefined;
    });
  });

  t.test('block on PostgreSQL: blocked on every instance for the block duration, past the window', async (t) => {
    const { pool } = await database(t);
    const a = await service(t, pool);
    const b = await service(t, pool);
    await onTime(t, async () => {
      const tenant = tenantWith({ public_key: { points: 2, duration_seconds: 1, block_seconds: 2 } });
      const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'public' };
      const opened = Date.now();
      const burst = [await outcome(a.check(s)), await outcome(b.check(s))];
      const blockSent = Date.now();
      burst.push(await outcome(a.check(s)));
      const blockSeen = Date.now();
      if (blockSeen - opened >= 1000) return `the burst of 3 checks took ${blockSeen - opened} ms, not within the 1 s window`;
      await sleep(1100 - (Date.now() - blockSeen));
      const mid = await outcome(b.check(s));
      const midDone = Date.now() - blockSent;
      if (midDone >= 2000) return `the check after the window came back ${midDone} ms after the block began, not within its 2 s`;
      t.ok('decision' in burst[0]! && 'decision' in burst[1]!, 'two admitted');
      await expect429(t, replay(burst[2]!), 2, 2);
      await expect429(t, replay(mid), 2, 1, 'other instance, window passed, still blocked');
      await sleep(2100 - (Date.now() - blockSeen));
      t.equal((await a.check(s)).headers['RateLimit-Remaining'], '1', 'recovered');
      return undefined;
    });
  });

  t.test('fractional windows are kept (whole milliseconds): a 0.3 s window ends after 0.3 s, not 1 s', async (t) => {
    const { pool, sql } = await database(t);
    const a = await service(t, pool);
    await onTime(t, async () => {
      const tenant = tenantWith({ private_key: { points: 1, duration_seconds: 0.3 } });
      const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' };
      // The window opens while the first check is at PostgreSQL: after `opened`, before `firstSeen`.
      const opened = Date.now();
      const first = await outcome(a.check(s));
      const firstSeen = Date.now();
      const second = await outcome(a.check(s));
      const took = Date.now() - opened;
      if (took >= 300) return `2 checks took ${took} ms, not within the 0.3 s window`;
      t.equal('decision' in first && first.decision.headers['RateLimit-Reset'], '1', 'Reset rounded up to a whole second');
      await expect429(t, replay(second), 1, 1);
      // The window has surely ended 350 ms after firstSeen; a 1 s window would still run until
      // 1 s after `opened`, and refuse the check below.
      await sleep(350 - (Date.now() - firstSeen));
      const third = await outcome(a.check(s));
      if (Date.now() - opened >= 1000) return 'the check after the window came back more than 1 s after the first was sent';
      t.ok('decision' in third, 'admitted in the next window');
      return undefined;
    });
    const rows = await sql(`SELECT expire FROM tokenproxy.rate_limits WHERE key LIKE 'tp:rl:private_key:%'`);
    t.ok(rows.rows.length >= 1, 'the counter is a row of the table');
    t.notOk(lines.some((l) => typeof l.msg === 'string' && l.msg.includes('rounded up')), 'no rounding warning for a window of whole milliseconds');
  });

  t.test('a window finer than a millisecond is rounded up (a bigint column), with a warning', async (t) => {
    const { pool } = await database(t);
    const a = await service(t, pool);
    const tenant = tenantWith({ private_key: { points: 100, duration_seconds: 5.0004 } });
    const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' };
    t.equal((await a.check(s)).headers['RateLimit-Remaining'], '99', 'counted, not a store failure');
    t.equal(a.stats().storeFailures, 0);
    t.ok(lines.some((l) => l.msg === 'rate-limit windows on PostgreSQL are whole milliseconds; rounded up' && l.rule === 'private_key'));
  });

  t.test('rows: prefix, rule, tenant, digest, in rate_limits.table; never a raw key; a long key_prefix works', async (t) => {
    const { pool, sql } = await database(t);
    const longPrefix = `deploy-${'x'.repeat(300)}:`;
    const a = await service(t, pool, { table: 'rl_one', key_prefix: 'tp:rl:' });
    const b = await service(t, pool, { table: 'rl_two', key_prefix: longPrefix });
    const tenant = tenantWith();
    const subject: Subject = { tenant, route: 'tokenize', clientIp: '192.0.2.7', apiKeyId: 'digest1', keyKind: 'public', legacy: true };
    await a.check(subject);
    const keys = (await sql('SELECT key FROM tokenproxy.rl_one ORDER BY key')).rows.map((r: { key: string }) => r.key);
    t.same(keys, [
      `tp:rl:creating_tokens:{${tenant.id}}:digest1|192.0.2.7`,
      `tp:rl:legacy_global:{${tenant.id}}:192.0.2.7`,
      `tp:rl:legacy_tokens_create:{${tenant.id}}:192.0.2.7`,
      `tp:rl:public_key:{${tenant.id}}:digest1|192.0.2.7`,
      `tp:rl:public_key_total:{${tenant.id}}:digest1`,
    ]);
    // An IPv6 client is keyed by its /64 (issue 31), never the full address.
    await a.check({ tenant, route: 'tokenize', clientIp: '2001:db8:1:2:aaaa:bbbb:cccc:dddd', apiKeyId: 'digest1', keyKind: 'public' });
    const v6 = (await sql(`SELECT key FROM tokenproxy.rl_one WHERE key LIKE '%2001%' ORDER BY key`)).rows.map((r: { key: string }) => r.key);
    t.same(v6, [`tp:rl:creating_tokens:{${tenant.id}}:digest1|2001:db8:1:2/64`, `tp:rl:public_key:{${tenant.id}}:digest1|2001:db8:1:2/64`]);

    // Another table: counted apart (the same subject starts at the top again there).
    const d = await b.check({ ...subject, legacy: false });
    t.equal(b.stats().storeFailures, 0, 'a key over 255 characters is a row like any other');
    t.equal(d.headers['RateLimit-Remaining'], String(Number(d.headers['RateLimit-Limit']) - 1), 'its own count');
    const two = (await sql('SELECT key FROM tokenproxy.rl_two')).rows.map((r: { key: string }) => r.key);
    t.ok(two.length > 0 && two.every((k: string) => k.startsWith(longPrefix)), `rl_two holds the other deployment's ${two.length} counters`);
  });

  t.test('the sweep deletes expired rows only', async (t) => {
    const { pool, sql } = await database(t);
    const counters = new PostgresCounters(pool, 'rate_limits');
    t.teardown(() => counters.close());
    t.equal(await counters.sweep(), 0, 'nothing before the table exists');
    await counters.ensureTable();
    const now = Date.now();
    await sql('INSERT INTO tokenproxy.rate_limits VALUES ($1, 1, $2), ($3, 1, $4)', ['old', now - 1000, 'live', now + 60_000]);
    t.equal(await counters.sweep(), 1);
    t.same((await sql('SELECT key FROM tokenproxy.rate_limits')).rows, [{ key: 'live' }]);
  });

  t.test('the table is created at start-up (ready()), before any check', async (t) => {
    const { pool, sql } = await database(t);
    const a = await service(t, pool, { table: 'rl_early' });
    await a.ready();
    const r = await sql(`SELECT relpersistence FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'tokenproxy' AND c.relname = 'rl_early'`);
    t.same(r.rows, [{ relpersistence: 'u' }], 'tokenproxy.rl_early exists, UNLOGGED');
  });

  t.test('store: postgres without the token store\'s pool is a start-up error', async (t) => {
    await t.rejects(RateLimitService.create(cfg, { log }), /rate_limits.store is postgres but the token store is not PostgreSQL/);
  });

  t.test('the table cannot be created (no schema): each check is a store failure naming only the SQLSTATE; created once it can be', async (t) => {
    const db = await server.database(t);
    const pool = new pg.Pool({ connectionString: db.url, max: 4 });
    t.teardown(() => pool.end());
    const capture = captureLog();
    const a = await RateLimitService.create(cfg, { log: capture.log, postgres: pool });
    t.teardown(() => a.close());
    const s: Subject = { tenant: tenantWith(), route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' };
    t.match(await rejection(a.check(s)), { code: 'rate_limit_unavailable', status: 503 });
    t.match(capture.lines.find((l) => l.event === 'rate_limit_store_error'), { error: 'PostgreSQL 3F000 (creating the rate-limit table)' }, 'invalid_schema_name, by code');
    await pool.query('CREATE SCHEMA tokenproxy');
    t.equal((await a.check(s)).headers['RateLimit-Limit'], '1000', 'the next check creates it and counts');
  });
}
