/**
 * test/helpers/cli-entry.ts, how the tests start the CLI: from dist/main.js only while dist/ is up
 * to date with the sources (a test must never run stale code), from src/main.ts under the test's
 * loader otherwise; and without tap's processinfo import, which tap's spawn hook would put back
 * into the child's NODE_OPTIONS.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { STAMP } from '../../scripts/build-if-stale.mjs';
import { chooseCliEntry, cliCommand, loaderArgs, splitNodeOptions, withoutProcessinfo } from '../helpers/cli-entry.js';

const PI = 'file:///w/node_modules/@tapjs/processinfo/dist/esm/import.mjs';
const TSX = '--import=file:///w/node_modules/tsx/dist/loader.mjs';

t.test('NODE_OPTIONS: split as node reads it, and without processinfo however it is given', async (t) => {
  t.same(splitNodeOptions(`"--import=${PI}"`), [`--import=${PI}`], 'tap writes it quoted');
  t.same(splitNodeOptions('--a  "b c" --d="e \\"f\\""'), ['--a', 'b c', '--d=e "f"']);
  t.equal(withoutProcessinfo(`"--import=${PI}"`), undefined, 'nothing left: no NODE_OPTIONS at all');
  t.equal(withoutProcessinfo(`--max-old-space-size=512 "--import=${PI}" --trace-warnings`), '--max-old-space-size=512 --trace-warnings');
  t.equal(withoutProcessinfo(`--import ${PI} --require "/a b/x.cjs"`), '--require "/a b/x.cjs"', 'a kept value with a space stays one word');
  t.equal(withoutProcessinfo('--trace-warnings'), '--trace-warnings');
  t.equal(withoutProcessinfo(undefined), undefined);
});

t.test("the test's flags for a child: the loader kept, processinfo and debugger flags dropped", async (t) => {
  t.same(loaderArgs([TSX, '--enable-source-maps', `--import=${PI}`, '--no-node-snapshot', '--inspect=0']), [TSX, '--enable-source-maps', '--no-node-snapshot']);
  t.same(loaderArgs(['--import', PI, TSX]), [TSX]);
});

t.test('dist/main.js only while dist/ is up to date; src/main.ts under the loader otherwise', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'tp-cli-entry-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'src'));
  mkdirSync(join(root, 'dist'));
  const at = (path: string, s: number) => {
    writeFileSync(join(root, path), '');
    utimesSync(join(root, path), s, s);
  };
  const argv = [TSX, '--enable-source-maps', `--import=${PI}`, '--no-node-snapshot'];
  const src = [TSX, '--enable-source-maps', '--no-node-snapshot', join(root, 'src/main.ts')];
  at('src/main.ts', 1000);
  at('package.json', 900);
  t.same(chooseCliEntry(root, argv), { from: 'src', reason: 'no successful build yet', prefix: src }, 'never built');
  at(STAMP, 2000);
  t.same(chooseCliEntry(root, argv), { from: 'src', reason: 'dist/main.js is missing', prefix: src }, 'a stamp but no dist/main.js');
  at('dist/main.js', 2000);
  t.same(chooseCliEntry(root, argv), { from: 'dist', reason: 'dist/ is up to date', prefix: ['--enable-source-maps', '--no-node-snapshot', join(root, 'dist/main.js')] });
  at('src/main.ts', 2500);
  t.same(chooseCliEntry(root, argv), { from: 'src', reason: 'sources changed since the last build', prefix: src }, 'a source edited after the build');
  at(STAMP, 3000);
  t.equal(chooseCliEntry(root, argv).from, 'dist', 'rebuilt');
  at('package.json', 3500);
  t.equal(chooseCliEntry(root, argv).from, 'src', 'package.json changed after the build');
});

t.test("the child's NODE_OPTIONS has no processinfo, though tap's spawn hook adds it to every child", async (t) => {
  const c = cliCommand(['--version'], { ...process.env, NODE_OPTIONS: `--trace-warnings "--import=${PI}"` });
  // The same command, with node told to print its NODE_OPTIONS instead of running the CLI.
  const node = c.args.indexOf(process.execPath);
  t.ok(node >= 0, 'node is in the command');
  const r = spawnSync(c.file, [...c.args.slice(0, node + 1), '-p', 'process.env.NODE_OPTIONS ?? "(none)"'], { env: c.env, encoding: 'utf8' });
  t.equal(r.status, 0, r.stderr);
  t.equal(r.stdout.trim(), '--trace-warnings');
  const bare = cliCommand(['--version']);
  const r2 = spawnSync(bare.file, [...bare.args.slice(0, bare.args.indexOf(process.execPath) + 1), '-p', 'process.env.NODE_OPTIONS ?? "(none)"'], { env: bare.env, encoding: 'utf8' });
  t.notMatch(r2.stdout, /processinfo/, `the test's own environment: ${r2.stdout.trim()}`);
});
