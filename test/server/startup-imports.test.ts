/**
 * What a start loads: the Redis and PostgreSQL clients (ioredis, pg) only when the config names
 * them, undici only when something is sent. A service on the embedded store, and the model that
 * `tokenproxy check-config` builds, load neither client; the model loads no HTTP client. Each costs
 * start-up time (check-config: 1.08 → 0.76 s CPU when they went) and memory for nothing.
 *
 * Each check runs in a new node process (the test's own TypeScript loader, without the test
 * runner's hooks) that imports the module and prints which of those packages are in the CommonJS
 * cache; the last check shows the probe sees a package that is loaded.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { loaderArgs } from '../helpers/cli-entry.js';

const WATCHED = ['ioredis', 'pg', 'undici'];

/** The watched packages loaded after `code` ran in a fresh process (ES module, cwd = repo). */
function loadedAfter(code: string): string[] {
  const script = `
    import { createRequire } from 'node:module';
    ${code}
    const loaded = Object.keys(createRequire(import.meta.url).cache);
    const names = ${JSON.stringify(WATCHED)}.filter((p) => loaded.some((f) => f.includes('/node_modules/' + p + '/')));
    process.stdout.write(JSON.stringify(names));
  `;
  const out = execFileSync(process.execPath, [...loaderArgs(), '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 60_000 });
  return JSON.parse(out) as string[];
}

t.test('the service module loads neither the Redis nor the PostgreSQL client', async (t) => {
  const loaded = loadedAfter(`await import('./src/server.ts');`);
  t.notOk(loaded.includes('ioredis'), `ioredis not loaded (${loaded.join(', ')})`);
  t.notOk(loaded.includes('pg'), `pg not loaded (${loaded.join(', ')})`);
});

t.test('the model (check-config) loads no store client and no HTTP client', async (t) => {
  t.same(loadedAfter(`await import('./src/model/compile.ts');`), [], 'none of ioredis, pg, undici');
});

t.test('an embedded store opened through the factory loads neither client', async (t) => {
  const loaded = loadedAfter(`
    const { createStore } = await import('./src/store/factory.ts');
    const store = await createStore({ kind: 'embedded', path: ':memory:', key_prefix: '' });
    await store.close();
  `);
  t.notOk(loaded.includes('ioredis') || loaded.includes('pg'), `neither loaded (${loaded.join(', ')})`);
});

t.test('the probe sees a client that is loaded', async (t) => {
  t.same(loadedAfter(`await import('./src/store/redis/index.ts'); await import('./src/store/postgres/index.ts');`), ['ioredis', 'pg']);
});
