/**
 * The tap plugin's option `processinfo-load-hook` (test/tap-tsx): by default tap starts each test
 * process with a preload that keeps @tapjs/processinfo's module load hook off while coverage is
 * off, and only then.
 *
 * The flags come from tap itself (its config and the Test class `npm test` built). A child started
 * as tap's runner starts a test process (processinfo's import in NODE_OPTIONS and in the flags, then
 * the plugin's flags) imports a module and reports whether processinfo recorded it, and whether its
 * NODE_OPTIONS (what its children start with) still name processinfo. With coverage off neither;
 * with coverage on both, which also shows that the probe sees a recording when there is one;
 * without the preload both even with coverage off.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { TapConfig } from '@tapjs/config';
import { execArgv } from '@tapjs/test';
import { ROOT } from '../helpers/cli-entry.js';

const dir = realpathSync(mkdtempSync(join(tmpdir(), 'tp-tap-processinfo-')));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const require = createRequire(join(ROOT, 'package.json'));
const processinfoImport = `--import=${pathToFileURL(join(require.resolve('@tapjs/processinfo'), '../../esm/import.mjs')).href}`;

const imported = join(dir, 'imported.mjs');
writeFileSync(imported, 'export const value = 1;\n');
const child = join(dir, 'child.mjs');
writeFileSync(
  child,
  [
    "import { pathToFileURL } from 'node:url';",
    'const [file, waitMs] = process.argv.slice(2);',
    'await import(pathToFileURL(file).href);',
    // processinfo's loader thread (node 20) reports a module by message: wait for it, up to waitMs.
    'const until = Date.now() + Number(waitMs);',
    // processinfo's data exists once it has recorded something (on node with synchronous hooks, it
    // starts on its first recording).
    'const recorded = () => globalThis[Symbol.for(\'@tapjs/processinfo.ProcessInfoNodeData\')]?.files.includes(file) ?? false;',
    'while (!recorded() && Date.now() < until) await new Promise((r) => setTimeout(r, 20));',
    // What a child of this process would start with.
    "const inOptions = /[\\\\/]@tapjs[\\\\/]processinfo[\\\\/]/.test(process.env.NODE_OPTIONS ?? '');",
    'console.log(JSON.stringify({ recorded: recorded(), inOptions }));',
    '',
  ].join('\n'),
);

function probe(pluginArgs: string[], coverage: '0' | '1' | undefined, waitMs: number): { recorded: boolean; inOptions: boolean } {
  const env: NodeJS.ProcessEnv = { ...process.env, _TAPJS_PROCESSINFO_COVERAGE_: coverage, _TAPJS_PROCESSINFO_CWD_: dir, _TAPJS_PROCESSINFO_EXCLUDE_: '/^(node|tapmock):/' };
  if (coverage === undefined) delete env._TAPJS_PROCESSINFO_COVERAGE_;
  // env(1) sets NODE_OPTIONS after this process's own processinfo spawn hook (under tap) has
  // rewritten it, so the child gets exactly what tap's runner gives a test process.
  const out = execFileSync(
    '/usr/bin/env',
    [`NODE_OPTIONS=${processinfoImport}`, process.execPath, '--enable-source-maps', processinfoImport, ...pluginArgs, child, imported, String(waitMs)],
    {
      cwd: dir,
      encoding: 'utf8',
      env,
    },
  );
  return JSON.parse(out.trim().split('\n').pop() ?? '{}');
}

// TapConfig's types list tap's own options, not those of the plugins the Test class was built with.
const config = await TapConfig.load();
const values = config.values as unknown as Parameters<typeof execArgv>[0] & Record<string, unknown>;
const args = execArgv(values);

t.test("tap's config leaves the hook out by default, through a preload", async (t) => {
  t.equal(config.projectRoot, ROOT);
  t.equal(values['processinfo-load-hook'], false);
  t.same(args, [`--require=${realpathSync(join(ROOT, 'test/tap-tsx/without-processinfo-hook.cjs'))}`]);
});

t.test('coverage off: processinfo records no module, and children do not start it', async (t) => {
  t.same(probe(args, '0', 500), { recorded: false, inOptions: false });
});

t.test("a child that lost tap's variables (the reactor host keeps a few by name) takes coverage as off", async (t) => {
  t.same(probe(args, undefined, 500), { recorded: false, inOptions: false });
});

t.test('coverage on: the hook stays and records the module', async (t) => {
  t.same(probe(args, '1', 10_000), { recorded: true, inOptions: true });
});

t.test('without the preload the hook records the module even with coverage off', async (t) => {
  t.same(probe([], '0', 10_000), { recorded: true, inOptions: true });
});
