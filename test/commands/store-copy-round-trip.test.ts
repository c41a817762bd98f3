/**
 * `tokenproxy store copy` (issue 24 item 4) the rest of the way round: a vault written by a
 * service on the embedded store, copied to PostgreSQL, goes PostgreSQL → Redis → embedded through
 * the real CLI; each target has the audit head of the store it came from, and a service started
 * on each answers every token as the first one did. One part of the store copy tests
 * (store-copy-fixture.ts; the first leg is checked in store-copy-postgres.test.ts).
 */
import t from 'tap';
import { join } from 'node:path';
import { postgresForFile } from '../helpers/postgres.js';
import { redisForFile, withFreshPrefix } from '../helpers/redis.js';
import { copyTo, copyVault } from './store-copy-fixture.js';

t.setTimeout(600_000);

const pgServer = await postgresForFile(t);
const redis = pgServer ? await redisForFile(t) : null;

if (pgServer && redis) {
  const v = copyVault(t);
  // Every database before the first subtest: tap's root test must not wait on anything between subtests.
  const pgA = await pgServer.database(t);
  await v.seed(t);
  const pgCfg = v.config('postgres', { kind: 'postgres', url: pgA.url });
  const redisHandle = withFreshPrefix(redis);
  const redisCfg = v.config('redis', { kind: 'redis', url: redisHandle.url, key_prefix: redisHandle.prefix });
  const dstDir = join(v.root, 'dst');
  const dstCfg = v.config('embedded2', { kind: 'embedded', path: join(dstDir, 'tokens.db') });

  await t.test('embedded → PostgreSQL, where the round trip starts', (t) => copyTo(t, v, pgCfg));

  await t.test('PostgreSQL → Redis → embedded: each target answers every token', async (t) => {
    const r = await v.cli('store', 'copy', '--from', pgCfg, '--to', redisCfg);
    t.equal(r.code, 0, r.output);
    for (const tenant of v.expected.keys()) t.equal(await v.headOf(redisCfg, tenant), await v.headOf(pgCfg, tenant), `tenant ${tenant}: the same audit head on Redis`);
    await v.answersEveryToken(t, { redis: redisHandle });
    const back = await v.cli('store', 'copy', '--from', redisCfg, '--to', dstCfg);
    t.equal(back.code, 0, back.output);
    for (const tenant of v.expected.keys()) t.equal(await v.headOf(dstCfg, tenant), await v.headOf(redisCfg, tenant), `tenant ${tenant}: the same audit head on the embedded store`);
    await v.answersEveryToken(t, { dataDir: dstDir });
  });
}
