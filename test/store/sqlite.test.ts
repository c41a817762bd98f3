/**
 * Which better-sqlite3 the embedded store loads (src/store/embedded/sqlite.ts): 12.x aborts Node 24
 * processes when a statement is collected without a current environment, 13.x segfaults on
 * Node 20, so the Node line decides. Checks the choice and that the loaded build works,
 * including from a worker thread that ends (where 12.x on Node 24 aborted a test process of ours).
 */
import t from 'tap';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { SQLITE_PACKAGE, Sqlite } from '../../src/store/embedded/sqlite.js';

const major = Number(process.versions.node.split('.')[0]);
const require = createRequire(import.meta.url);

t.test('the package matches the Node line', async (t) => {
  const { version } = require(`${SQLITE_PACKAGE}/package.json`) as { version: string };
  if (major >= 22) t.same([SQLITE_PACKAGE, version.split('.')[0]], ['better-sqlite3-napi', '13']);
  else t.same([SQLITE_PACKAGE, version.split('.')[0]], ['better-sqlite3', '12']);
});

t.test('the loaded build runs statements, and a worker using it ends cleanly', async (t) => {
  const db = new Sqlite(':memory:');
  t.teardown(() => db.close());
  db.exec('CREATE TABLE t (a INTEGER)');
  for (let i = 0; i < 200; i++) db.prepare('INSERT INTO t VALUES (?)').run(i);
  t.same(db.prepare('SELECT count(*) AS n FROM t').get(), { n: 200 });
  const code = `
    const Sqlite = require(${JSON.stringify(require.resolve(SQLITE_PACKAGE))});
    const db = new Sqlite(':memory:');
    for (let i = 0; i < 500; i++) db.prepare('SELECT ?').get(i);
    require('node:worker_threads').parentPort.postMessage('done');`;
  const worker = new Worker(code, { eval: true });
  const messages: unknown[] = [];
  worker.on('message', (m) => messages.push(m));
  const exit = await new Promise<number>((resolve) => worker.on('exit', resolve));
  t.same(messages, ['done']);
  t.equal(exit, 0, 'the worker exits 0');
});
