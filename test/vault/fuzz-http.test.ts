/**
 * Fuzz suite (fuzz-suite.ts) on the embedded store, over HTTP: generated /tokenize and /tokens
 * bodies to a service on a SQLite file (writer thread, WAL, fsync per commit), counted at the end
 * through a second connection. The in-process volume: fuzz-in-process.test.ts.
 */
import t from 'tap';
import { join } from 'node:path';
import { TENANT_A } from '../helpers/service.js';
import { fuzzStore } from './fuzz-suite.js';
// The build the store itself loads on this Node line: 12.x can abort Node 24 (src/store/embedded/sqlite.ts).
import { Sqlite as Database } from '../../src/store/embedded/sqlite.js';

await fuzzStore(t, {
  http: {
    service: {},
    runs: Number(process.env.FUZZ_HTTP ?? 1000),
    countTokens: async (s) => {
      const db = new Database(join(s.dataDir, 'tokens.db'), { readonly: true, fileMustExist: true });
      try {
        return (db.prepare('SELECT COUNT(*) AS n FROM vault_tokens WHERE tenant = (SELECT n FROM dict WHERE s = ?)').get(TENANT_A) as { n: number }).n;
      } finally {
        db.close();
      }
    },
  },
});
