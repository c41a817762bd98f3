/**
 * `tokenproxy store copy` (issue 24 item 4) killed with -9 while it copies to PostgreSQL, then run
 * again: the same counts, no duplicate, and verify-audit passes on the target with the source's
 * head. One part of the store copy tests (store-copy-fixture.ts).
 */
import t from 'tap';
import { spawnCli } from '../helpers/cli-entry.js';
import { TENANT_A } from '../helpers/service.js';
import { postgresForFile } from '../helpers/postgres.js';
import { copyVault, count, sourceHeads } from './store-copy-fixture.js';

t.setTimeout(600_000);

const pgServer = await postgresForFile(t);

if (pgServer) {
  const v = copyVault(t);
  // Every database before the first subtest: tap's root test must not wait on anything between subtests.
  const pgKill = await pgServer.database(t);
  await v.seed(t);

  await t.test('kill -9 mid-copy, then again: the same counts, no duplicate, the audit trail intact', async (t) => {
    const heads = await sourceHeads(v);
    const total = v.total();
    const db = pgKill;
    const cfg = v.config('postgres-kill', { kind: 'postgres', url: db.url });
    const child = spawnCli(['store', 'copy', '--from', v.src, '--to', cfg, '--batch', '2'], { ...process.env, TOKENPROXY_MASTER_KEY: v.masterKey }, {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    let atKill = 0;
    // Waits for the copy to have written tokens (the schema exists once the CLI connected).
    for (;;) {
      if (child.exitCode !== null) break;
      atKill = await count(db, 'SELECT count(*) AS n FROM tokenproxy.tokens').catch(() => 0);
      if (atKill >= 10) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    child.kill('SIGKILL');
    await exited;
    t.equal(child.signalCode, 'SIGKILL', `killed while copying (${output})`);
    const written = await count(db, 'SELECT count(*) AS n FROM tokenproxy.tokens');
    t.ok(written > 0 && written < total, `the kill left a partial copy (${written} of ${total} tokens)`);
    const r = await v.cli('store', 'copy', '--from', v.src, '--to', cfg, '--batch', '7');
    t.equal(r.code, 0, r.output);
    t.match(r.output, `tenant ${TENANT_A}: 280 token(s)`);
    t.equal(await count(db, 'SELECT count(*) AS n FROM tokenproxy.tokens'), total, 'every token, once');
    t.equal(await count(db, 'SELECT count(DISTINCT (tenant, id, custom_id)) AS n FROM tokenproxy.tokens'), total, 'no duplicate');
    for (const [tenant, head] of heads) t.equal(await v.headOf(cfg, tenant), head, `tenant ${tenant}: verify-audit passes with the source's head`);
  });
}
