/** The SDK iteration suite (test/compat/sdk-iterate-suite.ts, issue 28) on the PostgreSQL store: a private cluster, a database per service. */
import t from 'tap';
import { sdkIterateSuite } from './sdk-iterate-suite.js';
import { postgresForFile } from '../helpers/postgres.js';

const server = await postgresForFile(t);
if (server) sdkIterateSuite(t, async (t) => ({ postgres: await server.database(t) }));
