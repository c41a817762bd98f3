/** Issue 23 finding 6 on the embedded store: verify-suite.ts, tampering with the SQLite file directly. */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestService, TENANT_A } from '../helpers/service.js';
import { runVerifyAuditSuite, sqliteStore } from './verify-suite.js';

// Child processes of the CLI compile the TypeScript again: seconds each on a busy machine.
t.setTimeout(300_000);

const dir = mkdtempSync(join(tmpdir(), 'tp-verify-audit-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

runVerifyAuditSuite(t, 'embedded', dir, async (t) => {
  const s = await startTestService(t);
  return { s, raw: sqliteStore(join(s.dataDir, 'tokens.db'), TENANT_A) };
});
