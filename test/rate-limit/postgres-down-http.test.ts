/**
 * PostgreSQL killed under running instances that keep both their tokens and their limits there
 * (issue 24). The limits fail as on Redis (redis-down-http.test.ts), and with them the
 * token store:
 * - `on_store_error: reject`: every limited route answers 503 rate_limit_unavailable (a problem
 *   body, no cause message), without hanging;
 * - `allow`: counted on the instance; routes that need no store are served (the management
 *   routes), token routes then answer the token store's own 503 store_unavailable;
 * - after the restart, both instances enforce shared limits again, without a restart.
 */
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { postgresForFile } from '../helpers/postgres.js';
import { startTestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';
import { client, expect429, expectAllowed, limitedConfig, tenant, type Reply } from './http-helpers.js';

/** Generous on a loaded machine, far below a hang. */
const NO_HANG_MS = 3_000;

const server = await postgresForFile(t, { killable: true });
if (server) {
  const db = await server.database(t);
  const down = tenant({ custom: { private_key: { points: 3, duration_seconds: 60 }, management_key: { points: 3, duration_seconds: 60 } }, apps: [{ kind: 'private' }, { kind: 'management' }] });
  const after = tenant({ custom: { private_key: { points: 4, duration_seconds: 60 } }, apps: [{ kind: 'private' }] });
  const probe = tenant({ apps: [{ kind: 'private' }] });
  const tenants = [down, after, probe];
  const rl = (mode: 'reject' | 'allow') => ({ store: 'postgres', on_store_error: mode, timeout_ms: 200 });
  const rejecting = await startTestService(t, { config: limitedConfig(tenants, { rate_limits: rl('reject') }), postgres: db });
  const allowing = await startTestService(t, { config: limitedConfig(tenants, { rate_limits: rl('allow') }), postgres: db, masterKey: rejecting.masterKey });
  const timed = async (p: Promise<Reply>): Promise<[Reply, number]> => {
    const start = Date.now();
    const r = await p;
    return [r, Date.now() - start];
  };

  t.test('killed, then restarted', async (t) => {
    const cr = client(t, rejecting.url);
    const ca = client(t, allowing.url);
    expectAllowed(t, await cr.send('GET', `/tokens/${randomUUID()}`, { key: probe.keys[0][0] }), 404, 1000, 999, 'up, reject instance:');
    expectAllowed(t, await ca.send('GET', `/tokens/${randomUUID()}`, { key: probe.keys[0][0] }), 404, 1000, 998, 'up, allow instance (shared count):');

    await server.kill();

    for (let i = 0; i < 3; i++) {
      const [r, ms] = await timed(cr.send('POST', '/tokenize', { key: down.keys[0][0], body: { v: `written-while-down-${i}` } }));
      t.equal(r.status, 503, `reject: 503 (${r.text})`);
      t.match(r.headers['content-type'], /^application\/problem\+json/);
      t.match(r.body, { code: 'rate_limit_unavailable', status: 503, title: 'The rate-limit store is unavailable' });
      t.notMatch(r.text, /ECONNREFUSED|postgres|connection|127\.0\.0\.1/i, 'no cause message in the body');
      t.ok(ms < NO_HANG_MS, `reject: answered without hanging (${ms} ms)`);
    }

    // allow: the management routes need no store: served, counted on the instance.
    const mkey = down.keys[1][0];
    for (let i = 1; i <= 3; i++) {
      const [r, ms] = await timed(ca.send('GET', '/applications', { key: mkey }));
      expectAllowed(t, r, 200, 3, 3 - i, `allow: a management route served while PostgreSQL is down, request ${i}:`);
      t.ok(ms < NO_HANG_MS, `allow: answered without hanging (${ms} ms)`);
    }
    expect429(t, await ca.send('GET', '/applications', { key: mkey }), 3, 'allow: the per-instance count still stops a flood:');
    // A token route passes the limits and meets the token store down: its own 503.
    const [tok, ms] = await timed(ca.send('GET', `/tokens/${randomUUID()}`, { key: down.keys[0][0] }));
    t.equal(tok.status, 503, 'allow: a token route is the token store\'s 503');
    t.match(tok.body, { code: 'store_unavailable' });
    t.equal(tok.headers['ratelimit-limit'], '3', 'counted on the instance first');
    t.ok(ms < NO_HANG_MS, `allow: the token route answered without hanging (${ms} ms)`);
    t.equal(allowing.logs().split('\n').filter((l) => l.includes('"event":"rate_limit_store_error"')).length, 1, 'allow: the failure is logged once per interval, not per request');

    await server.restart();

    await waitFor(async () => (await cr.send('GET', '/tokens', { key: probe.keys[0][0] })).status === 200, { timeoutMs: 20_000, intervalMs: 100, what: 'the reject instance serving again' });
    const recovered = () => allowing.logs().includes('"event":"rate_limit_store_recovered"');
    await waitFor(async () => {
      await ca.send('GET', '/tokens', { key: probe.keys[0][0] });
      return recovered();
    }, { timeoutMs: 20_000, intervalMs: 100, what: 'the allow instance counting on PostgreSQL again' });

    // Shared limits again: the two instances together admit exactly 4 of a fresh key's requests.
    const key = after.keys[0][0];
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) statuses.push((await (i % 2 ? ca : cr).send('GET', `/tokens/${randomUUID()}`, { key })).status);
    t.same(statuses, [404, 404, 404, 404, 429, 429, 429, 429], 'exactly N across both instances (counted in PostgreSQL, not per instance)');

    const all = await cr.send('GET', '/tokens?size=100', { key: down.keys[0][0] });
    t.equal(all.status, 200);
    t.same((all.body as { data: unknown[] }).data, [], 'no token from a request refused with 503');
  });
}
