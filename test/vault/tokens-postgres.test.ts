/** The tokens suite (read, list, search, update, delete) on the PostgreSQL store (issue 24). */
import t from 'tap';
import { tokensSuite } from './tokens-suite.js';
import { postgresForFile } from '../helpers/postgres.js';

const server = await postgresForFile(t);
if (server) tokensSuite(t, async (t) => ({ postgres: await server.database(t) }));
