/** Detokenization suite on the PostgreSQL store (issue 24); tampering edits the audit rows directly. */
import t from 'tap';
import pg from 'pg';
import { postgresForFile, type PostgresDatabase } from '../helpers/postgres.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { detokenizeConfig, runDetokenizeSuite } from './detokenize-suite.js';

const server = await postgresForFile(t);
if (server) {
  const dbs = new WeakMap<TestService, PostgresDatabase>();
  const withClient = async <T>(s: TestService, fn: (c: pg.Client) => Promise<T>): Promise<T> => {
    const client = new pg.Client(dbs.get(s)!.url);
    await client.connect();
    try {
      return await fn(client);
    } finally {
      await client.end();
    }
  };
  /** An event row as the JSON of the event it holds (prev_hash as hex, as the chain has it). */
  const EVENT_JSON = `json_build_object('seq', seq, 'prev_hash', encode(prev_hash, 'hex'), 'tenant_id', tenant_id, 'application_id', application_id,
    'action', action, 'token_ids', token_ids, 'destination', destination, 'request_id', request_id, 'created_at', created_at)::text AS event`;
  runDetokenizeSuite(t, {
    start: async (t) => {
      const db = await server.database(t);
      const s = await startTestService(t, { config: detokenizeConfig(), postgres: db });
      dbs.set(s, db);
      return s;
    },
    deleteEvent: (s, tenant, seq) => withClient(s, async (c) => {
      await c.query('DELETE FROM tokenproxy.audit_events WHERE tenant_id = $1 AND seq = $2', [tenant, seq]);
    }),
    editEvent: (s, tenant, seq, edit) => withClient(s, async (c) => {
      const r = await c.query<{ event: string }>(`SELECT ${EVENT_JSON} FROM tokenproxy.audit_events WHERE tenant_id = $1 AND seq = $2`, [tenant, seq]);
      const e = JSON.parse(edit(r.rows[0]!.event)) as Record<string, unknown>;
      await c.query(
        `UPDATE tokenproxy.audit_events SET application_id = $3, action = $4, token_ids = $5, destination = $6, request_id = $7, created_at = $8
         WHERE tenant_id = $1 AND seq = $2`,
        [tenant, seq, e.application_id, e.action, e.token_ids, e.destination, e.request_id, e.created_at],
      );
    }),
    rawEvents: (s, tenant) => withClient(s, async (c) =>
      (await c.query<{ event: string }>(`SELECT ${EVENT_JSON} FROM tokenproxy.audit_events WHERE tenant_id = $1 ORDER BY seq`, [tenant])).rows.map((r) => r.event)),
    storeConfig: (s) => ({ kind: 'postgres', url: dbs.get(s)!.url }),
  });
}
