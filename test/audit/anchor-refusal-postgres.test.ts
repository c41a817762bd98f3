/** The audit chain never signs what it did not write, on the PostgreSQL store: anchor-refusal-suite.ts, tampering with the tables directly. */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { postgresForFile } from '../helpers/postgres.js';
import { startTestService, TENANT_A } from '../helpers/service.js';
import { postgresTamper, runAnchorRefusalSuite } from './anchor-refusal-suite.js';

t.setTimeout(300_000);
const server = await postgresForFile(t);
if (server) {
  const dir = mkdtempSync(join(tmpdir(), 'tp-anchor-refusal-pg-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // Every database before the first subtest: tap's root test must not wait on anything between subtests.
  const dbs = [await server.database(t), await server.database(t), await server.database(t)];
  runAnchorRefusalSuite(t, 'postgres', dir, async (t) => {
    const db = dbs.shift()!;
    const s = await startTestService(t, { postgres: db });
    return { s, tamper: postgresTamper(db.url, TENANT_A) };
  });
}
