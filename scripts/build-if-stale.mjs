#!/usr/bin/env node
// `npm start`'s prestart (issue 29): compiles the TypeScript only when a source is newer than the
// last successful build, so a start with nothing changed costs no build (tsc took about 9 s on
// every `npm start`). The stamp dist/.build-stamp is written after a build that succeeded, with
// the time the build began: a source saved while tsc ran is older than nothing it missed.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** What the build reads: every file under src/, and the TypeScript settings. */
export const BUILD_INPUTS = ['src', 'tsconfig.json', 'tsconfig.build.json', 'package.json'];
export const STAMP = join('dist', '.build-stamp');

/** Whether to build: no stamp (never built here, or the last build failed), or an input newer than it. */
export function needsBuild(newestInputMs, stampMs) {
  return stampMs === null || newestInputMs === null || newestInputMs > stampMs;
}

function mtimeMs(path) {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return null;
  }
}

/** The newest modification time of `paths` (files, or directories walked whole) under `root`; null when none exists. */
export function newestMtime(root, paths = BUILD_INPUTS) {
  let newest = null;
  const visit = (path) => {
    const st = statSync(path, { throwIfNoEntry: false });
    if (!st) return;
    if (st.isDirectory()) {
      for (const e of readdirSync(path)) visit(join(path, e));
      return;
    }
    if (newest === null || st.mtimeMs > newest) newest = st.mtimeMs;
  };
  for (const p of paths) visit(join(root, p));
  return newest;
}

/** `{ build, reason }` for the checkout at `root`. */
export function buildDecision(root) {
  const stamp = mtimeMs(join(root, STAMP));
  const newest = newestMtime(root);
  const build = needsBuild(newest, stamp);
  const reason = stamp === null ? 'no successful build yet' : build ? 'sources changed since the last build' : 'dist/ is up to date';
  return { build, reason };
}

function main() {
  const root = fileURLToPath(new URL('..', import.meta.url));
  const { build } = buildDecision(root);
  if (!build) return 0;
  const began = new Date();
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) return r.status ?? 1;
  mkdirSync(join(root, 'dist'), { recursive: true });
  const stamp = join(root, STAMP);
  writeFileSync(stamp, `${began.toISOString()}\n`);
  utimesSync(stamp, began, began);
  return 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) process.exitCode = main();
