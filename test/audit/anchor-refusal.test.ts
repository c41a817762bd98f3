/** The audit chain never signs what it did not write, on the embedded store: anchor-refusal-suite.ts, tampering with the SQLite file directly. */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestService, TENANT_A } from '../helpers/service.js';
import { runAnchorRefusalSuite, tamperOf } from './anchor-refusal-suite.js';
import { sqliteStore } from './verify-suite.js';

t.setTimeout(300_000);

const dir = mkdtempSync(join(tmpdir(), 'tp-anchor-refusal-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

runAnchorRefusalSuite(t, 'embedded', dir, async (t) => {
  const s = await startTestService(t);
  return { s, tamper: tamperOf(sqliteStore(join(s.dataDir, 'tokens.db'), TENANT_A)) };
});
