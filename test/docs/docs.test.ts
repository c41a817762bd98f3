/**
 * The error table of docs/api.md matches the catalogue; the committed JSON Schema and configuration
 * reference match the zod schema; README, SECURITY.md, CHANGELOG.md and docs/ link only inside the
 * repository, and every link and anchor resolves; the README is short and links every guide (issue
 * 29); the environment-variable table of docs/configuration.md matches what src/ reads.
 */
import t from 'tap';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { catalogue } from '../../src/errors.js';
import { configJsonSchemaText } from '../../src/config/json-schema.js';
import { referenceRows, withReference } from '../../src/config/reference.js';

t.test('docs/api.md lists every error code with its status and title, and no other', async (t) => {
  const readme = readFileSync('docs/api.md', 'utf8');
  const rows = [...readme.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \| (.+?) \|$/gm)].map((m) => [m[1], Number(m[2]), m[3]]);
  const expected = Object.entries(catalogue).map(([code, v]) => [code, v.status, v.title]);
  t.same(rows, expected);
});

t.test('config/tokenproxy.schema.json is up to date (npm run schema)', async (t) => {
  t.equal(readFileSync('config/tokenproxy.schema.json', 'utf8'), configJsonSchemaText());
});

// ---------------------------------------------------------------------------------------------
// The README and docs/ stand alone (issue 13): generated tables current, links inside the repo.
// ---------------------------------------------------------------------------------------------

const DOCS = ['README.md', 'SECURITY.md', 'CHANGELOG.md', ...readdirSync('docs').filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

/** Markdown text without fenced code blocks and inline code (neither holds links). */
function prose(md: string): string {
  return md.replace(/^```[^\n]*\n[\s\S]*?^```$/gm, '').replace(/`(?:[^`\n]|\n(?!\n))*`/g, '');
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes, repeats numbered. */
function anchors(md: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of md.replace(/^```[^\n]*\n[\s\S]*?^```$/gm, '').matchAll(/^#{1,6} (.+)$/gm)) {
    const base = m[1]!.trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

t.test('docs/configuration.md holds the current configuration reference (npm run docs:config)', async (t) => {
  const doc = readFileSync('docs/configuration.md', 'utf8');
  t.equal(doc, withReference(doc), 'regenerate with npm run docs:config');
  t.same(referenceRows().filter((r) => r.description === '').map((r) => r.path), [], 'every setting has a description (src/config/descriptions.ts)');
  t.ok(referenceRows().length > 50, 'the table walks into tenants, applications, proxies and transforms');
});

t.test('no link in README.md, SECURITY.md, CHANGELOG.md or docs/ points outside the repository, and every one resolves', async (t) => {
  for (const file of DOCS) {
    const text = prose(readFileSync(file, 'utf8'));
    t.same([...text.matchAll(/\bhttps?:\/\/[^\s)>]+/g)].map((m) => m[0]), [], `${file}: no URL outside code`);
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      t.notMatch(target, /^[a-z][a-z0-9+.-]*:/i, `${file}: ${target} is a relative link`);
      const [path, anchor] = target!.split('#') as [string, string | undefined];
      const resolved = path === '' ? file : join(dirname(file), path);
      t.ok(existsSync(resolved), `${file}: ${target} exists`);
      if (anchor !== undefined && resolved.endsWith('.md') && existsSync(resolved)) {
        t.ok(anchors(readFileSync(resolved, 'utf8')).has(anchor), `${file}: #${anchor} is a heading of ${resolved}`);
      }
    }
  }
});

t.test('nothing in the repository names a document outside it', async (t) => {
  // Built from pieces so this file does not match itself.
  const outside = new RegExp(['DESIGN(\\.md| §)', 'compat\\.md', '\\.\\./shared/'].join('|'));
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (['node_modules', 'dist', '.test-build', 'data', 'coverage', '.git', '.tap'].includes(e.name)) continue;
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(ts|mjs|js|md|ya?ml|json)$/.test(e.name) && e.name !== 'package-lock.json') files.push(p);
    }
  };
  walk('.');
  t.ok(files.length > 100, 'the tree was read');
  t.same(files.filter((f) => outside.test(readFileSync(f, 'utf8'))), []);
});

t.test('the README fits on a few screens and links every guide (issue 29)', async (t) => {
  const readme = readFileSync('README.md', 'utf8');
  // Five minutes to read: one example per main job (issue 29), the browser's added by issue 27 (was
  // 160), the token types table by issue 26 and the stores' bytes a token by issue 24 (was 170).
  // 240, not 200: issue 28 requires the compatibility table ("Coming from the hosted service") in the README.
  t.ok(readme.split('\n').length <= 240, `README.md has ${readme.split('\n').length} lines (at most 240)`);
  const linked = new Set([...prose(readme).matchAll(/\]\(([^)#\s]+)/g)].map((m) => m[1]));
  for (const doc of [...DOCS.filter((f) => f.startsWith('docs/')), 'SECURITY.md', 'CHANGELOG.md']) t.ok(linked.has(doc), `README links ${doc}`);
});

t.test('docs/configuration.md lists every environment variable the service reads, and no other', async (t) => {
  const read = new Set<string>();
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (p.endsWith('.ts')) for (const m of readFileSync(p, 'utf8').matchAll(/\benv\.([A-Z][A-Z0-9_]*)|env\[['"]([A-Z][A-Z0-9_]*)['"]\]/g)) read.add(m[1] ?? m[2]!);
    }
  };
  walk('src');
  t.ok(read.has('TOKENPROXY_MASTER_KEY'), 'the scan finds the variables');
  const readme = readFileSync('docs/configuration.md', 'utf8');
  const start = readme.indexOf('\n## Environment variables\n');
  t.ok(start > 0, 'docs/configuration.md has the section');
  const section = readme.slice(start, readme.indexOf('\n#', start + 2));
  const listed = [...section.matchAll(/^\| `([A-Z][A-Z0-9_]*)` \|/gm)].map((m) => m[1]!);
  t.same(listed.sort(), [...read].sort());
});

t.test('a command in the docs is in a sh block, which the docs test runs (issue 29)', async (t) => {
  // An untagged or text block that starts with a command would escape test/docs/examples.test.ts.
  const command = /^\s*(\$ )?(curl|npx|npm|node|tokenproxy|sqlite3|redis-cli|pg_dump|systemctl|kill|export)\b/;
  const found: string[] = [];
  for (const file of DOCS) {
    for (const m of readFileSync(file, 'utf8').matchAll(/^( *)```(\S*)\n([^\n]*)/gm)) {
      if (!['sh', 'bash'].includes(m[2]!) && command.test(m[3]!)) found.push(`${file}: \`\`\`${m[2]} ${m[3]}`);
    }
  }
  t.same(found, []);
});
