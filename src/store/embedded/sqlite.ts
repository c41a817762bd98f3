/**
 * better-sqlite3, the build that is safe on this Node line.
 *
 * better-sqlite3 12.x (a plain V8 addon) builds on Node 20, 22 and 24, but on Node 24 its
 * Statement destructor can abort the process ("Assertion failed: (env) != nullptr" in
 * RemoveEnvironmentCleanupHook) when a statement is garbage-collected where Node has no current
 * environment, e.g. while a worker thread ends; we saw it kill a test process of ours. 13.x is a
 * Node-API rewrite without that problem, but needs Node >= 22 and segfaults on Node 20.
 * package.json therefore installs both: 12.x as `better-sqlite3` and 13.x under the npm alias
 * `better-sqlite3-napi` (prebuilt, no compile), and the Node version picks one here.
 * The types are 12.x's (@types/better-sqlite3); the API we use is the same in both.
 */
import type BetterSqlite3 from 'better-sqlite3';
import { createRequire } from 'node:module';

const NODE_MAJOR = Number(process.versions.node.split('.')[0]);

/** The package loaded: 13.x (Node-API) from Node 22 on, 12.x on Node 20. */
export const SQLITE_PACKAGE = NODE_MAJOR >= 22 ? 'better-sqlite3-napi' : 'better-sqlite3';

export const Sqlite = createRequire(import.meta.url)(SQLITE_PACKAGE) as typeof BetterSqlite3;
