/** Detokenization suite on the embedded store; tampering edits the SQLite file directly. */
import t from 'tap';
import { join } from 'node:path';
import { withStoreDb } from '../helpers/store-file.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { detokenizeConfig, runDetokenizeSuite } from './detokenize-suite.js';

const file = (s: TestService) => join(s.dataDir, 'tokens.db');
runDetokenizeSuite(t, {
  start: (t) => startTestService(t, { config: detokenizeConfig() }),
  deleteEvent: async (s, tenant, seq) => {
    withStoreDb(s, (db) => db.prepare('DELETE FROM audit_events WHERE tenant_id = ? AND seq = ?').run(tenant, seq));
  },
  editEvent: async (s, tenant, seq, edit) => {
    withStoreDb(s, (db) => {
      const row = db.prepare('SELECT event FROM audit_events WHERE tenant_id = ? AND seq = ?').get(tenant, seq) as { event: string };
      db.prepare('UPDATE audit_events SET event = ? WHERE tenant_id = ? AND seq = ?').run(edit(row.event), tenant, seq);
    });
  },
  rawEvents: async (s, tenant) =>
    withStoreDb(s, (db) => (db.prepare('SELECT event FROM audit_events WHERE tenant_id = ? ORDER BY seq').all(tenant) as Array<{ event: string }>).map((r) => r.event)),
  storeConfig: (s) => ({ kind: 'embedded', path: file(s) }),
});
