/** SVC-IDEMPOTENCY-KEY on the embedded store; the scan reads the idempotency rows of the SQLite file. */
import t from 'tap';
import { join } from 'node:path';
import { Sqlite as Database } from '../../src/store/embedded/sqlite.js';
import { idempotencySuite } from './idempotency-suite.js';

idempotencySuite(t, async () => ({}), async (s) => {
  const db = new Database(join(s.dataDir, 'tokens.db'), { readonly: true });
  try {
    const rows = db.prepare('SELECT * FROM idempotency_keys').all() as Record<string, unknown>[];
    return rows.map((r) => JSON.stringify(r));
  } finally {
    db.close();
  }
});
