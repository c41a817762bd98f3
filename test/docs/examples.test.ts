/**
 * Every shell example of README.md and docs/*.md runs as written against a real tokenproxy and
 * prints what the document shows (issue 29), so a doc that stops telling the truth fails the build.
 * The conventions (output blocks, `…`, the skip and upstream markers) are in ./extract.ts and, for
 * authors, in docs/development.md ("Examples in the docs").
 *
 * The setting is the one the docs describe: a copy of the repository, built as `npm start` builds
 * it, serving the default config/tokenproxy.yaml (its ./data/ new, with the development master
 * key), and the sample upstream scripts/echo-upstream.mjs. Both listen on free ports; the docs'
 * 127.0.0.1:8080 and 127.0.0.1:9090 are rewritten to them in the commands and back in the outputs.
 * The blocks of one document run in order in that copy, each in a new bash that first loads the
 * variables the blocks before it set (`set -a`), as a reader's terminal keeps them.
 */
import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { examples, matches } from './extract.js';
import { routesTable, withRoutesTable, type OpenApiDoc } from './api-table.js';
import { waitFor } from '../helpers/wait.js';
import { postgresSkip, startPostgres } from '../helpers/postgres.js';
import { redisSkip, startRedis } from '../helpers/redis.js';
import { createStore } from '../../src/store/factory.js';
import { createLogger } from '../../src/log.js';

// A build, a service start and some fifty commands, on a machine that may be loaded.
t.setTimeout(900_000);

/** Blocks a doc may mark as not run (installing, starting what the test starts): a handful. */
const MAX_SKIPPED = 5;

t.test('the matcher: `…` stands for any text, JSON compares without layout, a difference fails', async (t) => {
  t.ok(matches('id: …\nok', 'id: 5c59-17\r\nok\n'));
  t.ok(matches('{\n  "id": "…",\n  "n": 1\n}', '{"id":"abc","n":1}', true));
  t.notOk(matches('{"n": 1}', '{"n":2}', true), 'another value');
  t.notOk(matches('a…c', 'abd'), 'another end');
  t.notOk(matches('{"a": "x y"}', '{"a":"xy"}', true), 'white space inside a string counts');
  const md = ['```sh', 'echo hi', '```', '', '```text', 'hi', '```', '<!-- docs-test: skip installs -->', '```sh', 'apt-get x', '```', '<!-- docs-test: needs redis -->', '```sh', 'redis-cli ping', '```'].join('\n');
  t.same(examples('x.md', md), [
    { file: 'x.md', line: 1, code: 'echo hi', expected: { text: 'hi', json: false } },
    { file: 'x.md', line: 9, code: 'apt-get x', skip: 'installs' },
    { file: 'x.md', line: 13, code: 'redis-cli ping', needs: 'redis' },
  ]);
});

const DOCS = ['README.md', ...readdirSync('docs').filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];

interface Proc {
  child: ChildProcess;
  output(): string;
}

const procs: ChildProcess[] = [];
function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Proc {
  const child = spawn(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  procs.push(child);
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d));
  child.stderr!.on('data', (d: Buffer) => (out += d));
  return { child, output: () => out };
}
function killGroup(child: ChildProcess): void {
  try {
    process.kill(-child.pid!, 'SIGKILL');
  } catch {
    // gone already
  }
}
t.teardown(() => procs.forEach(killGroup));

/** The environment a reader's shell has: none of the service's own variables. */
const env: NodeJS.ProcessEnv = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(TOKENPROXY_|PORT$|HOST$|NODE_OPTIONS$|TAP)/.test(k))),
  // npm's own network calls (update check) have nothing to do with the examples.
  npm_config_update_notifier: 'false',
};

function exited(p: Proc, timeoutMs: number): Promise<number | null> {
  return new Promise((resolve, reject) => {
    if (p.child.exitCode !== null) return resolve(p.child.exitCode);
    const timer = setTimeout(() => {
      killGroup(p.child);
      reject(new Error(`did not finish within ${timeoutMs} ms; output:\n${p.output().slice(-2000)}`));
    }, timeoutMs);
    p.child.once('exit', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

t.test('every shell example in README.md and docs/ runs and prints what the doc shows', async (t) => {
  const all = DOCS.map((f) => ({ file: f, examples: examples(f, readFileSync(f, 'utf8')) }));
  const skipped = all.flatMap((d) => d.examples.filter((e) => e.skip !== undefined));
  for (const s of skipped) t.comment(`not run: ${s.file}:${s.line}: ${s.skip}`);
  t.ok(skipped.length <= MAX_SKIPPED, `at most ${MAX_SKIPPED} examples are marked not run (${skipped.length})`);
  t.ok(all.reduce((n, d) => n + d.examples.length, 0) >= 20, 'the docs hold their examples');

  // A copy of the repository, built as `npm start` builds it (its prestart: build-if-stale). The
  // checkout's dist/ comes along with every file's time, so a build that is up to date there is
  // up to date in the copy and costs nothing; sources newer than it are built here.
  const work = mkdtempSync(join(tmpdir(), 'tp-docs-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  cpSync(process.cwd(), work, { recursive: true, preserveTimestamps: true, filter: (src) => !/\/(node_modules|data|\.tap|\.test-build|coverage|\.git)$/.test(src) });
  symlinkSync(join(process.cwd(), 'node_modules'), join(work, 'node_modules'));
  const build = run(process.execPath, ['scripts/build-if-stale.mjs'], work, env);
  t.equal(await exited(build, 300_000), 0, `the build succeeds ${build.output()}`);

  // The first `npx tokenproxy` in a new directory runs the package's prepare script
  // (build-if-stale, a no-op after the build above; before it wrote no stamp, npx built again: 48 s
  // at a load average of 22, and a block holding the first npx call ran past 120 s). Done here,
  // once, so a block's time is its own.
  const warm = run('npx', ['tokenproxy', '--version'], work, env);
  t.equal(await exited(warm, 300_000), 0, `npx tokenproxy runs ${warm.output()}`);

  const upstream = run(process.execPath, ['scripts/echo-upstream.mjs'], work, { ...env, PORT: '0' });
  const upPort = await waitFor(() => /echo upstream on http:\/\/127\.0\.0\.1:(\d+)/.exec(upstream.output())?.[1], { timeoutMs: 30_000, what: 'the sample upstream listens' });
  const configPath = join(work, 'config/tokenproxy.yaml');
  writeFileSync(configPath, readFileSync(configPath, 'utf8').replaceAll('127.0.0.1:9090', `127.0.0.1:${upPort}`));
  const service = run(process.execPath, ['--no-node-snapshot', 'dist/main.js'], work, { ...env, PORT: '0' });
  const port = await waitFor(() => /tokenproxy listening[^\n]*"url":"http:\/\/127\.0\.0\.1:(\d+)"|"url":"http:\/\/127\.0\.0\.1:(\d+)"[^\n]*tokenproxy listening/.exec(service.output())?.slice(1).find(Boolean), {
    timeoutMs: 120_000,
    what: 'tokenproxy listens',
  });

  // docs/api.md's route table is the running service's OpenAPI document (DOCS_WRITE=1 rewrites it).
  const doc = (await (await fetch(`http://127.0.0.1:${port}/openapi.json`)).json()) as OpenApiDoc;
  const api = readFileSync('docs/api.md', 'utf8');
  const current = withRoutesTable(api, routesTable(doc));
  if (process.env.DOCS_WRITE === '1' && current !== api) writeFileSync('docs/api.md', current);
  else t.equal(api, current, 'docs/api.md lists every route as GET /openapi.json does (DOCS_WRITE=1 npx tap test/docs/examples.test.ts rewrites it)');

  // The servers some blocks need (`needs redis`, `needs postgres`): started here when a block
  // asks; without them (and without the TOKENPROXY_REQUIRE_* flag that makes that a failure) the
  // block is left out, and says so.
  const needs = new Set(all.flatMap((d) => d.examples.map((e) => e.needs)).filter(Boolean));
  let redisUrl: string | undefined;
  let pgUrl: string | undefined;
  if (needs.has('redis') && !redisSkip()) {
    const redis = await startRedis();
    t.teardown(() => redis.stop());
    redisUrl = redis.url;
  }
  if (needs.has('postgres') && !postgresSkip()) {
    const server = await startPostgres();
    t.teardown(() => server.stop());
    pgUrl = (await server.database(t)).url;
    // The schema pg_dump --schema=tokenproxy copies: the PostgreSQL store makes it when it opens.
    const store = await createStore({ kind: 'postgres', url: pgUrl, pool_size: 2 } as Parameters<typeof createStore>[0], { log: createLogger('silent') });
    await store.close();
  }
  const toReal = (s: string) => {
    let out = s.replace(/(127\.0\.0\.1|localhost):8080/g, `$1:${port}`).replaceAll('127.0.0.1:9090', `127.0.0.1:${upPort}`);
    if (redisUrl) out = out.replaceAll('redis://127.0.0.1:6379', redisUrl);
    if (pgUrl) out = out.replaceAll('postgres://postgres@127.0.0.1:5432/tokenproxy', pgUrl);
    return out;
  };
  const toDoc = (s: string) => s.replaceAll(`127.0.0.1:${port}`, '127.0.0.1:8080').replaceAll(`localhost:${port}`, 'localhost:8080').replaceAll(`127.0.0.1:${upPort}`, '127.0.0.1:9090');

  for (const doc of all) {
    const state = join(work, `.docs-test-${doc.file.replace(/\W/g, '_')}.env`);
    for (const ex of doc.examples.filter((e) => e.skip === undefined)) {
      if ((ex.needs === 'redis' && !redisUrl) || (ex.needs === 'postgres' && !pgUrl)) {
        t.comment(`not run: ${ex.file}:${ex.line}: needs ${ex.needs}, which is not installed here`);
        continue;
      }
      await t.test(`${ex.file}:${ex.line}`, async (t) => {
        const script = `set -a\n[ -f '${state}' ] && . '${state}'\n${toReal(ex.code)}\n__rc=$?\nexport -p > '${state}'\nexit $__rc\n`;
        const before = upstream.output().length;
        const p = run('bash', ['-c', script], work, env);
        let stdout = '';
        p.child.stdout!.on('data', (d: Buffer) => (stdout += d));
        const code = await exited(p, 180_000);
        t.equal(code, 0, 'exits 0', { block: ex.code, output: p.output() });
        if (ex.expected) {
          const actual = toDoc(stdout);
          t.ok(matches(ex.expected.text, actual, ex.expected.json), 'prints what the doc shows', { found: actual, wanted: ex.expected.text });
        }
        if (ex.upstream !== undefined) {
          const wanted = ex.upstream;
          const printed = () => toDoc(upstream.output().slice(before)).replace(/^echo upstream on .*\n/m, '');
          const ok = await waitFor(() => matches(wanted, printed()), { timeoutMs: 5_000, what: 'the upstream prints' }).catch(() => false);
          t.ok(ok, 'the upstream prints what the doc shows', { found: printed(), wanted });
        }
      });
    }
  }
  killGroup(service.child);
  killGroup(upstream.child);
});
