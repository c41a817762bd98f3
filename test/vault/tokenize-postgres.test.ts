/** The tokenize suite on the PostgreSQL store (issue 24): each service gets a database of its own. */
import t from 'tap';
import { tokenizeSuite } from './tokenize-suite.js';
import { postgresForFile } from '../helpers/postgres.js';

const server = await postgresForFile(t);
if (server) tokenizeSuite(t, async (t) => ({ postgres: await server.database(t) }));
