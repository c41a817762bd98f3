/**
 * Two service instances on one PostgreSQL database (issue 24: `store.kind: postgres` and
 * `rate_limits.store: postgres`, nothing else shared): their counters are shared, so together
 * they admit exactly N within a window, not 2N; a Block set through one instance holds on the
 * other; Throttle recovers after the window; the counters are rows of `rate_limits.table`.
 */
import t from 'tap';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { postgresForFile } from '../helpers/postgres.js';
import { startTestService } from '../helpers/service.js';
import { client, driveRow, limitedConfig, oneToken, tenant, type Reply } from './http-helpers.js';
import { blockAcross, blockTenant, exactness, exactnessTenants } from './shared-suite.js';

const server = await postgresForFile(t);
if (server) {
  const db = await server.database(t);
  const { seq, conc } = exactnessTenants();
  const blk = blockTenant();
  const thr = tenant({ custom: { creating_tokens: { points: 3, duration_seconds: 1 } }, apps: [{ kind: 'private' }] });
  // The counter-naming check spends a point of its own tenant: the exactness checks run beside
  // it (t.jobs) and count every point of theirs.
  const own = tenant({ custom: { private_key: { points: 50, duration_seconds: 30 } }, apps: [{ kind: 'private' }] });
  const config = limitedConfig([seq, conc, blk, thr, own], { rate_limits: { store: 'postgres', table: 'rl_shared', timeout_ms: 1000 } });

  // Two instances on the same database: the token store and the limits are both shared.
  const a = await startTestService(t, { config, postgres: db });
  const b = await startTestService(t, { config, postgres: db, masterKey: a.masterKey });
  t.jobs = 4;

  exactness(t, a, b, { seq, conc });

  blockAcross(t, a, b, blk);

  t.test('Throttle on PostgreSQL across instances: recovers after the window', async (t) => {
    const ca = client(t, a.url);
    const cb = client(t, b.url);
    let i = 0;
    await driveRow(t, {
      send: async (): Promise<Reply> => {
        const n = i++;
        const r = await (n % 2 ? cb : ca).send('POST', n % 3 ? '/tokens' : '/tokenize', { key: thr.keys[0][0], body: oneToken() });
        return r.status === 201 ? { ...r, status: 200 } : r;
      },
      okStatus: 200, points: 3, durationSeconds: 1, mitigation: { kind: 'throttle' },
    });
  });

  t.test('the counters are rows of tokenproxy.<rate_limits.table>, keyed without the API key', async (t) => {
    await client(t, a.url).send('GET', `/tokens/${randomUUID()}`, { key: own.keys[0][0] });
    const c = new pg.Client(db.url);
    await c.connect();
    t.teardown(() => c.end());
    const keys = (await c.query<{ key: string }>('SELECT key FROM tokenproxy.rl_shared')).rows.map((r) => r.key);
    t.ok(keys.some((k) => k.startsWith(`tp:rl:private_key:{${own.id}}:`)), 'private_key counter of the tenant');
    t.notOk(keys.some((k) => k.includes(own.keys[0][0])), 'the key itself is never in a counter key');
  });
}
