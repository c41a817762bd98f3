/**
 * A throwaway PostgreSQL cluster for a benchmark (issue 24): the test helper's private cluster
 * (test/helpers/postgres.ts: initdb in a temporary directory, a free loopback port, run as the
 * `postgres` user when the bench runs as root), always one of its own (TOKENPROXY_TEST_PG_URL is
 * not used: a bench must not load a shared server). Its settings are PostgreSQL's defaults, fsync
 * and synchronous_commit on, as the README requires: durable, like the embedded store's fsync per
 * commit and the Redis rows' appendfsync always. Returns null (with the reason) when initdb and
 * pg_ctl are not installed.
 */
import pg from 'pg';
import { postgresSkip, startPostgres, type PostgresServer } from '../../test/helpers/postgres.js';

export interface BenchPostgres {
  /** The server's settings, for the printout. */
  settings: string;
  /** A fresh database (dropped by stop). */
  database(): Promise<{ url: string; name: string }>;
  /** pg_database_size of a database after a CHECKPOINT (every dirty page written to its files). */
  databaseSize(name: string): Promise<number>;
  stop(): Promise<void>;
}

export async function startBenchPostgres(): Promise<BenchPostgres | { skipped: string }> {
  const reason = postgresSkip({ own: true });
  if (reason) return { skipped: reason };
  const server: PostgresServer = await startPostgres({ own: true });
  const teardowns: Array<() => unknown> = [];
  const admin = async <T>(fn: (c: pg.Client) => Promise<T>): Promise<T> => {
    const c = new pg.Client({ connectionString: server.adminUrl });
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.end();
    }
  };
  const settings = await admin(async (c) => {
    // current_setting: with units (shared_buffers 128MB, not 16384 pages).
    const r = await c.query<{ name: string; setting: string }>(
      "SELECT name, current_setting(name) AS setting FROM pg_settings WHERE name IN ('server_version', 'fsync', 'synchronous_commit', 'shared_buffers', 'max_connections') ORDER BY name",
    );
    return r.rows.map((row) => `${row.name} ${row.setting}`).join(', ');
  });
  return {
    settings: `PostgreSQL (a private cluster): ${settings}`,
    database: () => server.database({ teardown: (fn) => void teardowns.push(fn) }),
    databaseSize: (name) =>
      admin(async (c) => {
        await c.query('CHECKPOINT');
        const r = await c.query<{ size: string }>('SELECT pg_database_size($1) AS size', [name]);
        return Number(r.rows[0]!.size);
      }),
    stop: async () => {
      for (const fn of teardowns.reverse()) await fn();
      await server.stop();
    },
  };
}
