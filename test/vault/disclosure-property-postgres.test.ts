/**
 * The disclosure property (disclosure-suite.ts) on the PostgreSQL store, in a database of its own;
 * skipped without PostgreSQL, a failure under TOKENPROXY_REQUIRE_POSTGRES=1 (helpers/postgres.ts).
 */
import t from 'tap';
import { postgresForFile } from '../helpers/postgres.js';
import { startTestService } from '../helpers/service.js';
import { runDisclosureSuite } from './disclosure-suite.js';

const server = await postgresForFile(t);
if (server) {
  await runDisclosureSuite(t, {
    start: async (t, config) => startTestService(t, { config, postgres: await server.database(t) }),
  });
}
