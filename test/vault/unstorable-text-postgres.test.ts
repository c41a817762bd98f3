/** Text no store can hold is refused (400 naming the field), on the PostgreSQL store. */
import t from 'tap';
import { unstorableTextSuite } from './unstorable-text-suite.js';
import { postgresForFile } from '../helpers/postgres.js';

const server = await postgresForFile(t);
if (server) unstorableTextSuite(t, async (t) => ({ postgres: await server.database(t) }));
