/** Data-key rotation with the service running, on the embedded SQLite store (see rotate-suite.ts). */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OPS_TENANT } from '../helpers/ops.js';
import { runCli } from '../helpers/process.js';
import { rotateSuite } from './rotate-suite.js';

const root = mkdtempSync(join(tmpdir(), 'tp-rotate-embedded-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));

// Both instances and the CLI write one SQLite file: WAL mode and busy_timeout let each process
// open it with its own writer.
t.test('embedded store', (t) => rotateSuite(t, root, { kind: 'embedded', path: join(root, 'tokens.db'), url: '', key_prefix: 'tp:' }));

t.test('--tenant is refused: data keys belong to the store', async (t) => {
  const r = await runCli(['rotate-data-key', '--tenant', OPS_TENANT]);
  t.equal(r.code, 2);
  t.match(r.output, /data keys belong to the store and are shared by every tenant; --tenant is not supported/);
});
