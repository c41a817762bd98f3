/**
 * `tokenproxy store copy` (issue 24 item 4), through the real CLI (child processes) and a real
 * service over HTTP: a vault written by a service on the embedded store is copied to PostgreSQL,
 * verified, and a second run is a no-op; verify-audit passes on the target with the source's
 * head, and a service started on it answers every token as the first one did (reads, lists in
 * the same order, search, detokenize). One part of the store copy tests (store-copy-fixture.ts).
 */
import t from 'tap';
import { TENANT_A } from '../helpers/service.js';
import { postgresForFile } from '../helpers/postgres.js';
import { copyVault, sourceHeads } from './store-copy-fixture.js';

t.setTimeout(600_000);

const pgServer = await postgresForFile(t);

if (pgServer) {
  const v = copyVault(t);
  // Every database before the first subtest: tap's root test must not wait on anything between subtests.
  const pgA = await pgServer.database(t);
  await v.seed(t);
  const pgCfg = v.config('postgres', { kind: 'postgres', url: pgA.url });

  await t.test('embedded → PostgreSQL: copied, verified, resumable as a no-op; a service answers every token', async (t) => {
    const heads = await sourceHeads(v);
    const r = await v.cli('store', 'copy', '--from', v.src, '--to', pgCfg, '--batch', '50');
    t.equal(r.code, 0, r.output);
    t.match(r.output, `tenant ${TENANT_A}: 280 token(s) (280 written now)`);
    t.match(r.output, /counts match, 200 sampled token\(s\) identical/);
    const again = await v.cli('store', 'copy', '--from', v.src, '--to', pgCfg);
    t.equal(again.code, 0, again.output);
    t.match(again.output, `tenant ${TENANT_A}: 280 token(s) (0 written now)`, 'a second run writes nothing');
    t.match(again.output, /audit event\(s\) \(0 written now\)/);
    for (const [tenant, head] of heads) t.equal(await v.headOf(pgCfg, tenant), head, `tenant ${tenant}: verify-audit passes with the source's head`);
    await v.answersEveryToken(t, { postgres: pgA });
  });
}
