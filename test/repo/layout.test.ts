/**
 * The test layout stays one way (issue 25): tests for src/X/ are in test/X/. Every `*.test.ts`
 * sits at depth one (test/<folder>/<file>, so `../helpers/…` imports hold) in a folder named for
 * a folder of src/, or in one of the few feature folders listed here (and in docs/development.md,
 * "Test layout") for tests that cover a whole feature across modules. No test/unit/,
 * test/integration/ or other sort by kind comes back: a new folder is a src/ folder or is added
 * to this list on purpose.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Folders for tests that cover a feature across src/ modules, with what belongs there. */
export const FEATURE_FOLDERS: Record<string, string> = {
  server: 'the whole process: start-up, shutdown, workers, reload, signals, connections, logging, production mode',
  compat: "the original service's Node SDK against tokenproxy",
  docs: "the documents' examples and README promises that span several modules",
  repo: 'the repository itself: the import graph, the container files, this layout',
};

/** Folders under test/ that hold no test files: shared helpers, fixtures, the tap plugin. */
export const SUPPORT_FOLDERS = ['helpers', 'fixtures', 'tap-tsx'];

/** The problems of a test tree: one line per misplaced file or unknown folder. */
export function layoutProblems(testDir: string, srcFolders: readonly string[]): string[] {
  const allowed = new Set([...srcFolders, ...Object.keys(FEATURE_FOLDERS)]);
  const problems: string[] = [];
  const walk = (dir: string, depth: number): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.name === 'node_modules') continue;
      const rel = join(dir, e.name).slice(testDir.length + 1);
      if (e.isDirectory()) {
        if (depth === 0 && !allowed.has(e.name) && !SUPPORT_FOLDERS.includes(e.name)) {
          problems.push(`test/${rel}/: not a src/ folder, a listed feature folder or a support folder`);
        }
        walk(join(dir, e.name), depth + 1);
      } else if (e.name.endsWith('.test.ts')) {
        const top = rel.split('/')[0]!;
        if (depth !== 1) problems.push(`test/${rel}: a test file must be at test/<folder>/<file>.test.ts`);
        else if (!allowed.has(top)) problems.push(`test/${rel}: tests live in a folder named for src/ or a feature folder`);
      }
    }
  };
  walk(testDir, 0);
  return problems;
}

const srcFolders = readdirSync('src', { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);

t.test('every test file is in a src/ folder or a listed feature folder, at depth one', async (t) => {
  t.same(layoutProblems('test', srcFolders), []);
});

t.test('the check finds a test sorted by kind, a nested one and an unknown folder', async (t) => {
  // The walk over a made-up tree, so the check above is shown able to fail.
  const root = mkdtempSync(join(tmpdir(), 'tp-layout-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  for (const f of ['proxy/ok.test.ts', 'unit/x.test.ts', 'proxy/deep/y.test.ts', 'top.test.ts', 'helpers/h.ts', 'stuff/notes.md']) {
    mkdirSync(join(root, f, '..'), { recursive: true });
    writeFileSync(join(root, f), '');
  }
  t.same(layoutProblems(root, ['proxy']).sort(), [
    'test/proxy/deep/y.test.ts: a test file must be at test/<folder>/<file>.test.ts',
    'test/stuff/: not a src/ folder, a listed feature folder or a support folder',
    'test/top.test.ts: a test file must be at test/<folder>/<file>.test.ts',
    'test/unit/: not a src/ folder, a listed feature folder or a support folder',
    'test/unit/x.test.ts: tests live in a folder named for src/ or a feature folder',
  ]);
});

t.test('docs/development.md names the rule and every feature folder', async (t) => {
  const doc = readFileSync('docs/development.md', 'utf8');
  t.match(doc, /tests for `src\/X\/` are in `test\/X\/`/);
  for (const f of Object.keys(FEATURE_FOLDERS)) t.ok(doc.includes(`\`test/${f}/\``), `docs/development.md names test/${f}/`);
});
