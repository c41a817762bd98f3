/** JSON bodies must be UTF-8, on the PostgreSQL store: the suite of utf8-body-suite.ts. */
import t from 'tap';
import { postgresForFile } from '../helpers/postgres.js';
import { utf8Suite } from './utf8-body-suite.js';

const server = await postgresForFile(t);
if (server) utf8Suite(t, async (t) => ({ postgres: await server.database(t) }));
