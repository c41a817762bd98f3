/** The token types and alias ids over HTTP on the PostgreSQL store (issue 26: every store). */
import t from 'tap';
import { startTestService } from '../helpers/service.js';
import { postgresForFile } from '../helpers/postgres.js';
import { typesOverHttp } from './token-types-suite.js';

const pg = await postgresForFile(t);
if (pg) t.test('on PostgreSQL', async (t) => typesOverHttp(t, await startTestService(t, { postgres: await pg.database(t) })));
