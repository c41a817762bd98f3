/**
 * `tokenproxy store copy` (issue 24 item 4) refuses targets that are another vault's before
 * anything is written: a target with its own data key ring, a finished copy whose token changed
 * on the target, another master key; and its usage errors exit 2 without a stack trace. One part
 * of the store copy tests (store-copy-fixture.ts).
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { startTestService, TENANT_A } from '../helpers/service.js';
import { runCli } from '../helpers/process.js';
import { postgresForFile } from '../helpers/postgres.js';
import { createStore } from '../../src/store/factory.js';
import { createLogger } from '../../src/log.js';
import { copyTo, copyVault, count } from './store-copy-fixture.js';

t.setTimeout(600_000);

const pgServer = await postgresForFile(t);

if (pgServer) {
  const v = copyVault(t);
  const { src, cli, masterKey } = v;
  // Every database before the first subtest: tap's root test must not wait on anything between subtests.
  const pgA = await pgServer.database(t);
  const pgOwnRing = await pgServer.database(t);
  await v.seed(t);
  const pgCfg = v.config('postgres', { kind: 'postgres', url: pgA.url });

  await t.test('a finished copy to PostgreSQL, for the re-run below', (t) => copyTo(t, v, pgCfg));

  await t.test('refused: a target with its own data key ring, a token with other contents, another master key', async (t) => {
    // A service started on the target made a data key ring of its own.
    const db = pgOwnRing;
    const svc = await startTestService(t, { postgres: db, masterKey });
    await svc.svc.close();
    const cfg = v.config('postgres-own-ring', { kind: 'postgres', url: db.url });
    const r = await cli('store', 'copy', '--from', src, '--to', cfg);
    t.equal(r.code, 1, r.output);
    t.match(r.output, /holds a data key ring of its own/);
    t.equal(await count(db, 'SELECT count(*) AS n FROM tokenproxy.tokens'), 0, 'nothing was written');

    // A token of the finished copy changed on the target: a re-run refuses before writing.
    const store = await createStore({ kind: 'postgres', url: pgA.url, path: '', key_prefix: '' }, { log: createLogger('silent') });
    try {
      const id = v.expected.get(TENANT_A)!.ids[0]!;
      const rec = (await store.tokens.get(TENANT_A, id))!;
      t.ok(await store.tokens.update({ ...rec, metadata: { ...rec.metadata, changed: 'on the target' } }));
    } finally {
      await store.close();
    }
    const changed = await cli('store', 'copy', '--from', src, '--to', pgCfg);
    t.equal(changed.code, 1, changed.output);
    t.match(changed.output, /with other contents than the source's/);

    const otherKey = await runCli(['store', 'copy', '--from', src, '--to', pgCfg], { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') });
    t.equal(otherKey.code, 1, otherKey.output);
    t.match(otherKey.output, /master key/);
  });

  await t.test('usage: help, missing options, a bad batch, the same store twice', async (t) => {
    const help = await cli('store', 'copy', '--help');
    t.equal(help.code, 0);
    t.match(help.output, /tokenproxy store copy --from CONFIG --to CONFIG/);
    t.match(help.output, /Exit 0: copied and verified/);
    t.match((await cli('--help')).output, /\n {2}store +copy a vault to another store/);
    for (const args of [['store'], ['store', 'move'], ['store', 'copy', '--from', src], ['store', 'copy', '--from', src, '--to', pgCfg, '--batch', '0'], ['store', 'copy', '--from', src, '--to', src]]) {
      const r = await cli(...args);
      t.equal(r.code, 2, `${args.join(' ')}: ${r.output}`);
      t.notMatch(r.output, /\n\s+at /, 'no stack trace');
    }
  });
}
