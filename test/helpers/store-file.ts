/**
 * A second connection to a test service's embedded store file, for tests that read or tamper with
 * it directly (waits up to 5 s for the service's own writer), closed when `fn` returns.
 */
import { join } from 'node:path';
import { Sqlite as Database } from '../../src/store/embedded/sqlite.js';
import type { TestService } from './service.js';

export function withStoreDb<T>(s: TestService, fn: (db: InstanceType<typeof Database>) => T): T {
  const db = new Database(join(s.dataDir, 'tokens.db'), { fileMustExist: true });
  try {
    db.pragma('busy_timeout = 5000');
    return fn(db);
  } finally {
    db.close();
  }
}
