/** SVC-IDEMPOTENCY-KEY on the PostgreSQL store (issue 24); the scan reads the idempotency rows. */
import t from 'tap';
import pg from 'pg';
import { idempotencySuite } from './idempotency-suite.js';
import { postgresForFile, type PostgresDatabase } from '../helpers/postgres.js';

const server = await postgresForFile(t);
if (server) {
  let db: PostgresDatabase | null = null;
  idempotencySuite(t, async (t) => ({ postgres: (db = await server.database(t)) }), async () => {
    const client = new pg.Client(db!.url);
    await client.connect();
    try {
      const r = await client.query('SELECT * FROM tokenproxy.idempotency_keys');
      return r.rows.map((row: Record<string, unknown>) => JSON.stringify(row));
    } finally {
      await client.end();
    }
  });
}
