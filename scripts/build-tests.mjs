#!/usr/bin/env node
// `npm test`'s pretest: compiles src/ and test/ to plain JavaScript in .test-build/, so each test
// process starts without a TypeScript loader (tsx cost about 0.45 s of CPU per test process, and
// as much again to load the service's modules through it).
//
// .test-build/ mirrors the checkout, so that a path a module builds from its own location
// (import.meta.url) finds the same file as from src/ or test/:
// - each .ts of src/ and test/ becomes a .js at the same path, transpiled alone by TypeScript
//   (transpileModule with tsconfig.json's options; no type check: `npm run typecheck` does that),
//   when its source's modification time is not the one the output was given (newer or older: a
//   checkout of another revision), or when tsconfig.json, the TypeScript version or the checkout's
//   place changed (all of them then); its inline source map names the .ts file, and tap runs tests
//   with --enable-source-maps, so stack traces and failures point at test/ and src/;
// - every other file of src/ and test/ (fixtures) is a symbolic link to it;
// - every other entry of the checkout's top level (package.json, public/, scripts/, dist/, …) is
//   a symbolic link to it;
// - whatever no longer has a source is removed.
import { lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(root, '.test-build');
const SOURCES = ['src', 'test'];

const compiled = (name) => name.endsWith('.ts') && !name.endsWith('.d.ts');

/** Every file under `dir` (node_modules left out), relative to the root. */
function files(dir) {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' ? [] : files(rel);
    return [rel];
  });
}
const all = SOURCES.flatMap(files);

function mtime(path) {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return -1;
  }
}

const started = Date.now();
// What every output depends on besides its own source: when this differs, everything is rebuilt.
const STAMP = join(OUT, '.stamp.json');
const stamp = JSON.stringify({
  root,
  typescript: JSON.parse(readFileSync(createRequire(import.meta.url).resolve('typescript/package.json'), 'utf8')).version,
  tsconfig: readFileSync(join(root, 'tsconfig.json'), 'utf8'),
});
let stampCurrent = false;
try {
  stampCurrent = readFileSync(STAMP, 'utf8') === stamp;
} catch {
  // no build yet
}
const wanted = new Set([STAMP]);
const stale = [];
for (const rel of all.filter((f) => compiled(f))) {
  const src = join(root, rel);
  const out = join(OUT, rel.replace(/\.ts$/, '.js'));
  wanted.add(out);
  // Within a millisecond: the time goes through utimes as a double of seconds.
  if (!stampCurrent || Math.abs(mtime(out) - mtime(src)) >= 1) stale.push({ src, out });
}
if (stale.length > 0) {
  // TypeScript only when something is to be compiled (loading it is most of a no-op run's time).
  const { default: ts } = await import('typescript');
  const { config } = ts.readConfigFile(join(root, 'tsconfig.json'), ts.sys.readFile);
  const { options } = ts.convertCompilerOptionsFromJson(config.compilerOptions, root);
  const compilerOptions = { ...options, module: ts.ModuleKind.ES2022, sourceMap: true, inlineSourceMap: false, declaration: false, outDir: undefined, rootDir: undefined };
  for (const { src, out } of stale) {
    const { outputText, sourceMapText } = ts.transpileModule(readFileSync(src, 'utf8'), { compilerOptions, fileName: src, reportDiagnostics: false });
    // The map names the real source (a file: URL), so a stack trace points into test/ or src/.
    const map = { ...JSON.parse(sourceMapText), sources: [pathToFileURL(src).href], sourceRoot: undefined, file: undefined };
    const code = outputText.replace(/\n\/\/# sourceMappingURL=.*\s*$/, '\n');
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, `${code}//# sourceMappingURL=data:application/json;base64,${Buffer.from(JSON.stringify(map)).toString('base64')}\n`);
    // The output carries its source's time: a different time later means a different source.
    const { atimeMs, mtimeMs } = statSync(src);
    utimesSync(out, atimeMs / 1000, mtimeMs / 1000);
  }
}
mkdirSync(OUT, { recursive: true });
if (!stampCurrent) writeFileSync(STAMP, stamp);
// Links: the other files of src/ and test/, and the checkout's other top-level entries.
const SKIP_TOP = new Set(['src', 'test', 'node_modules', '.git', '.test-build', '.tap']);
const links = [...all.filter((f) => !compiled(f)), ...readdirSync(root).filter((name) => !SKIP_TOP.has(name))];
let linked = 0;
for (const rel of links) {
  const at = join(OUT, rel);
  const target = relative(dirname(at), join(root, rel));
  wanted.add(at);
  let current;
  try {
    current = lstatSync(at).isSymbolicLink() ? readlinkSync(at) : null;
  } catch {
    current = undefined;
  }
  if (current === target) continue;
  if (current !== undefined) rmSync(at, { recursive: true, force: true });
  mkdirSync(dirname(at), { recursive: true });
  symlinkSync(target, at);
  linked++;
}

let removed = 0;
function prune(dir) {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries) {
    const p = join(dir, e.name);
    if (wanted.has(p)) continue;
    if (e.isDirectory()) prune(p);
    else {
      rmSync(p);
      removed++;
    }
  }
}
prune(OUT);
if (stale.length || removed || linked) {
  process.stdout.write(`tests: compiled ${stale.length} file(s) to ${relative(process.cwd(), OUT) || '.'}/, linked ${linked}, removed ${removed} in ${Date.now() - started} ms\n`);
}
