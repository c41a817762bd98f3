/**
 * scripts/build-tests.mjs, which compiles src/ and test/ into .test-build/ for `npm test`: run on
 * a small checkout of its own in a temporary directory. The compiled files run, find what they
 * build from import.meta.url, name their TypeScript source in their source maps, and follow every
 * change of a source: newer, older (a checkout of another revision), removed.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT } from '../helpers/cli-entry.js';

const dir = mkdtempSync(join(tmpdir(), 'tp-build-tests-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

function write(rel: string, text: string): void {
  mkdirSync(join(dir, rel, '..'), { recursive: true });
  writeFileSync(join(dir, rel), text);
}
const build = () => execFileSync(process.execPath, ['scripts/build-tests.mjs'], { cwd: dir, encoding: 'utf8' });
const run = (rel: string) => execFileSync(process.execPath, [rel], { cwd: dir, encoding: 'utf8' }).trim();

cpSync(join(ROOT, 'scripts/build-tests.mjs'), join(dir, 'scripts/build-tests.mjs'));
cpSync(join(ROOT, 'tsconfig.json'), join(dir, 'tsconfig.json'));
symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
write('package.json', '{"type":"module"}\n');
write('src/value.ts', 'export const value: number = 1;\n');
write('test/fixtures/data.json', '{"from":"fixture"}\n');
write(
  'test/x.test.ts',
  [
    "import { readFileSync } from 'node:fs';",
    "import { value } from '../src/value.js';",
    "const data: { from: string } = JSON.parse(readFileSync(new URL('./fixtures/data.json', import.meta.url), 'utf8'));",
    "const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));",
    'console.log(`${value} ${data.from} ${pkg.type}`);',
    '',
  ].join('\n'),
);

t.test('compiles each source, links the rest, and the result runs', async (t) => {
  t.match(build(), /compiled 2 file\(s\)/);
  const out = readFileSync(join(dir, '.test-build/src/value.js'), 'utf8');
  t.match(out, /^export const value = 1;/, 'plain JavaScript, types gone');
  const map = JSON.parse(Buffer.from(/sourceMappingURL=data:application\/json;base64,(\S+)/.exec(out)![1]!, 'base64').toString());
  t.same(map.sources, [pathToFileURL(join(dir, 'src/value.ts')).href], 'the source map names the TypeScript file');
  t.ok(lstatSync(join(dir, '.test-build/test/fixtures/data.json')).isSymbolicLink(), 'a fixture is a link');
  t.equal(realpathSync(join(dir, '.test-build/package.json')), realpathSync(join(dir, 'package.json')), 'so is a top-level file');
  t.equal(run('.test-build/test/x.test.js'), '1 fixture module', 'paths from import.meta.url find the same files');
  t.equal(build(), '', 'a second run has nothing to do');
});

t.test('a changed source is compiled again, even with an older time; a removed one goes', async (t) => {
  write('src/value.ts', 'export const value: number = 2;\n');
  const old = new Date('2020-01-01T00:00:00Z');
  utimesSync(join(dir, 'src/value.ts'), old, old);
  t.match(build(), /compiled 1 file\(s\)/);
  t.equal(run('.test-build/test/x.test.js'), '2 fixture module');
  rmSync(join(dir, 'test/fixtures/data.json'));
  rmSync(join(dir, 'src/value.ts'));
  t.match(build(), /removed 2/);
  t.notOk(existsSync(join(dir, '.test-build/src/value.js')), 'its output is gone');
  t.notOk(existsSync(join(dir, '.test-build/test/fixtures/data.json')), 'and the link of a removed fixture');
});

t.test('another tsconfig.json compiles everything again', async (t) => {
  write('src/value.ts', 'export const value: number = 3;\n');
  build();
  const cfg = JSON.parse(readFileSync(join(dir, 'tsconfig.json'), 'utf8'));
  cfg.compilerOptions.target = 'ES2020';
  writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify(cfg));
  t.match(build(), /compiled 2 file\(s\)/);
});
