/**
 * How a test runs the real CLI as a child process: the node arguments before the CLI's own, and
 * the child's environment. Every test that spawns the CLI takes both from here.
 *
 * From the compiled dist/main.js when dist/ is up to date with the sources (the stamp of
 * scripts/build-if-stale.mjs, which `npm install`/`npm ci` run as `prepare`): a child then starts
 * in about 0.8 s of CPU instead of about 1.9 s under the test's TypeScript loader, and the suite
 * starts some 200 of them (the cluster workers and the reactor host of a compiled service run from
 * dist/ too). When a source, tsconfig or package.json is newer than the last successful build (a
 * developer edited src/ and runs `npx tap FILE`), it falls back to src/main.ts under the test's
 * loader, as before: slower, never stale. Decided once per test process.
 *
 * Either way the child does not get tap's @tapjs/processinfo import: it only records process info
 * for tap's coverage report, which this repo disables, and costs each child (and each of its
 * cluster workers and reactor hosts, which inherit it) about 0.24 s of CPU. It comes on the test's
 * command line, which the child's flags are taken from, and in NODE_OPTIONS. Taking it out of
 * the environment given to spawn() is not enough: processinfo hooks every spawn of the test
 * process (process-on-spawn) and puts itself back into the child's NODE_OPTIONS. So under tap the
 * child is started as `/usr/bin/env NODE_OPTIONS=… node …` (or `env -u NODE_OPTIONS node …`):
 * env sets the child's NODE_OPTIONS after the hook has run and then execs node in the same
 * process, so the pid, the process group and the signals a test sends are node's as before.
 */
import t from 'tap';
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Readable } from 'node:stream';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildDecision } from '../../scripts/build-if-stale.mjs';
import { PROCESSINFO, splitNodeOptions, withoutProcessinfo, withoutProcessinfoImport } from '../tap-tsx/node-options.cjs';

export { splitNodeOptions, withoutProcessinfo };

/**
 * The checkout the tests run from (not the working directory: some children run elsewhere): two
 * folders up, or three from the compiled copy in .test-build/ (scripts/build-tests.mjs). Without a
 * trailing slash either way (resolve drops it), as tap's projectRoot is.
 */
const UP = resolve(fileURLToPath(new URL('../..', import.meta.url)));
export const ROOT = basename(UP) === '.test-build' ? dirname(UP) : UP;

/** The test process's node flags for a child to reuse: without debugger flags (the port would clash) nor processinfo. */
export function loaderArgs(execArgv: readonly string[] = process.execArgv): string[] {
  return withoutProcessinfoImport(execArgv.filter((a) => !a.startsWith('--inspect')));
}

/** The child's environment: `env` (the test's own by default) with NODE_OPTIONS cleaned as above. */
export function cliEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = { ...env };
  const opts = withoutProcessinfo(out.NODE_OPTIONS);
  if (opts === undefined) delete out.NODE_OPTIONS;
  else out.NODE_OPTIONS = opts;
  return out;
}

export interface CliEntry {
  /** 'dist': dist/main.js; 'src': src/main.ts under the test's loader. */
  from: 'dist' | 'src';
  /** Why (buildDecision's reason, or that dist/main.js is missing). */
  reason: string;
  /** The node arguments that run the CLI: flags, then the entry file. The CLI's arguments follow. */
  prefix: string[];
}

/** Which entry to use for the checkout at `root`; `execArgv` is the test process's flags. */
export function chooseCliEntry(root: string, execArgv: readonly string[] = process.execArgv): CliEntry {
  const main = join(root, 'dist/main.js');
  const decision = buildDecision(root);
  if (!decision.build && existsSync(main)) {
    return { from: 'dist', reason: decision.reason, prefix: ['--enable-source-maps', '--no-node-snapshot', main] };
  }
  const reason = decision.build ? decision.reason : 'dist/main.js is missing';
  return { from: 'src', reason, prefix: [...loaderArgs(execArgv), join(root, 'src/main.ts')] };
}

let chosen: CliEntry | undefined;

/** This test process's choice, made on first use; a fall-back to the sources is said once as a TAP comment. */
export function cliEntry(): CliEntry {
  if (!chosen) {
    chosen = chooseCliEntry(ROOT);
    if (chosen.from === 'src') t.comment(`CLI children run src/main.ts under the test loader (slower): ${chosen.reason}; \`node scripts/build-if-stale.mjs\` rebuilds dist/`);
  }
  return chosen;
}

/** Whether tap's processinfo hook is in this process (it rewrites the NODE_OPTIONS of every child). */
function processinfoHooked(): boolean {
  return PROCESSINFO.test(process.env.NODE_OPTIONS ?? '') || process.execArgv.some((a) => PROCESSINFO.test(a));
}

/** Where env(1) can set the child's NODE_OPTIONS; without it the child keeps processinfo (slower, still right). */
const ENV = process.platform !== 'win32' && existsSync('/usr/bin/env') ? '/usr/bin/env' : null;

export interface CliCommand {
  /** What to spawn: process.execPath, or /usr/bin/env in front of it under tap (see above). */
  file: string;
  args: string[];
  env: NodeJS.ProcessEnv;
}

/**
 * `tokenproxy ARGS` with the environment `env` (the test's own by default; NODE_OPTIONS is cleaned
 * here): `spawn(c.file, c.args, { env: c.env, … })`.
 */
export function cliCommand(args: readonly string[], env: NodeJS.ProcessEnv = process.env): CliCommand {
  const childEnv = cliEnv(env);
  return { ...nodeCommand([...cliEntry().prefix, ...args], childEnv.NODE_OPTIONS), env: childEnv };
}

/**
 * `node NODE_ARGS` with the child's NODE_OPTIONS set to `nodeOptions` (none when undefined): under
 * tap through /usr/bin/env, which sets them after processinfo's spawn hook has run (see above).
 */
function nodeCommand(nodeArgs: readonly string[], nodeOptions: string | undefined): { file: string; args: string[] } {
  if (!processinfoHooked() || ENV === null) return { file: process.execPath, args: [...nodeArgs] };
  const setOptions = nodeOptions === undefined ? ['-u', 'NODE_OPTIONS'] : [`NODE_OPTIONS=${nodeOptions}`];
  return { file: ENV, args: [...setOptions, process.execPath, ...nodeArgs] };
}

/**
 * Spawns `tokenproxy ARGS` (cliCommand) with the environment `env` and the other spawn options
 * `opts`; stdout and stderr are pipes (every caller reads them).
 */
export function spawnCli(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  opts: Omit<SpawnOptions, 'env' | 'stdio'> & { stdio: ['ignore' | 'pipe', 'pipe', 'pipe'] },
): ChildProcess & { stdout: Readable; stderr: Readable } {
  const c = cliCommand(args, env);
  return spawn(c.file, c.args, { ...opts, env: c.env }) as ChildProcess & { stdout: Readable; stderr: Readable };
}

export interface TestReactorHost {
  hostPath: string;
  execArgv: string[];
  execPath: string;
}

/**
 * How a test starts a reactor host (ReactorRuntime.start's and startService's `reactorHost`
 * options), on the same rule as the CLI children: dist/reactors/host.js when dist/ is up to date,
 * else src/reactors/host.ts under the test's loader; without tap's processinfo either way (through
 * /usr/bin/env, as cliCommand). A host from dist/ starts in about 0.2 s instead of about 0.5 s under
 * the loader, and the suite starts a hundred and more (each crash a test provokes is a restart).
 */
export function testReactorHost(): TestReactorHost {
  const fromDist = cliEntry().from === 'dist';
  const hostPath = join(ROOT, fromDist ? 'dist/reactors/host.js' : 'src/reactors/host.ts');
  const flags = [...(fromDist ? ['--enable-source-maps'] : loaderArgs()), '--no-node-snapshot'];
  const c = nodeCommand(flags, withoutProcessinfo(process.env.NODE_OPTIONS));
  return { hostPath, execPath: c.file, execArgv: c.args };
}
