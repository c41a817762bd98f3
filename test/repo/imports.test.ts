/**
 * The import graph of src/ (issue 13): no cycle, and src/config/ is a leaf that imports nothing
 * from the rest of src/ (so the config can be loaded and checked without the service's modules).
 * Imports are read with the TypeScript compiler's own parser: static `import` and `export … from`
 * (type-only ones too: a type cycle is still a design cycle) and `import('literal')`.
 */
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

const SRC = resolve('src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [path] : [];
  });
}

/** The module specifiers a file imports. */
export function specifiers(file: string, text: string): string[] {
  const out: string[] = [];
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      out.push(node.moduleSpecifier.text);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword && node.arguments[0] && ts.isStringLiteralLike(node.arguments[0])) {
      out.push(node.arguments[0].text);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/** `./x.js` from src/a/b.ts → src/a/x.ts (relative specifiers only; packages are not ours). */
function resolveSpecifier(from: string, spec: string): string | null {
  if (!spec.startsWith('.')) return null;
  return resolve(dirname(from), spec).replace(/\.js$/, '.ts');
}

function graph(): Map<string, string[]> {
  const g = new Map<string, string[]>();
  for (const file of sourceFiles(SRC)) {
    const deps = specifiers(file, readFileSync(file, 'utf8'))
      .map((s) => resolveSpecifier(file, s))
      .filter((d): d is string => d !== null);
    g.set(rel(file), deps.map(rel));
  }
  return g;
}

const rel = (p: string) => relative(SRC, p).split('\\').join('/');

/** Every cycle found by a depth-first walk, each as the path that closes it. */
function cycles(g: Map<string, string[]>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const walk = (n: string): void => {
    state.set(n, 'open');
    stack.push(n);
    for (const d of g.get(n) ?? []) {
      if (state.get(d) === 'open') found.push([...stack.slice(stack.indexOf(d)), d]);
      else if (!state.has(d)) walk(d);
    }
    stack.pop();
    state.set(n, 'done');
  };
  for (const n of [...g.keys()].sort()) if (!state.has(n)) walk(n);
  return found;
}

t.test('the parser sees every kind of import', async (t) => {
  const text = [
    "import a from './a.js';",
    "import type { B } from './b.js';",
    "export { c } from './c.js';",
    "export * from './d.js';",
    "const e = await import('./e.js');",
    "const f = 'import(\"./not-an-import.js\")';",
  ].join('\n');
  t.same(specifiers('x.ts', text), ['./a.js', './b.js', './c.js', './d.js', './e.js']);
});

t.test('the cycle finder finds a cycle', async (t) => {
  const g = new Map([['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['a']]]);
  t.same(cycles(g), [['a', 'b', 'c', 'a']]);
  t.same(cycles(new Map([['a', ['b']], ['b', []]])), []);
});

t.test('src/ has no import cycle', async (t) => {
  const g = graph();
  t.ok(g.size > 50, 'the graph holds the source files');
  const found = cycles(g).map((c) => c.join(' → '));
  t.same(found, [], found.join('\n'));
});

t.test('src/config/ imports nothing outside src/config/', async (t) => {
  const g = graph();
  const outside: string[] = [];
  const visited: string[] = [];
  for (const [file, deps] of g) {
    if (!file.startsWith('config/')) continue;
    visited.push(file);
    for (const d of deps) if (!d.startsWith('config/')) outside.push(`${file} → ${d}`);
  }
  // issue 30: an empty loop (no config/ file in the graph, a changed key form) must not pass:
  // every .ts file on disk under src/config/ was checked
  const onDisk = sourceFiles(join(SRC, 'config')).map(rel).sort();
  t.ok(onDisk.length > 0, 'src/config/ holds source files');
  t.same(visited.sort(), onDisk, 'every src/config/ file was checked');
  t.same(outside, [], outside.join('\n'));
});

/**
 * The folders of src/ as one graph: a folder (or a file at the top of src/) imports another when
 * one of its files does. A cycle here is an arrow that runs back up (issue 25): e.g. the log
 * importing the vault for Luhn, the pipeline importing the metrics registry, which imports the
 * pipeline's context. A file-level graph without cycles can still have them.
 */
function folderGraph(g: Map<string, string[]>): Map<string, string[]> {
  const unit = (file: string) => (file.includes('/') ? file.slice(0, file.indexOf('/') + 1) : file);
  const out = new Map<string, Set<string>>();
  for (const [file, deps] of g) {
    const from = unit(file);
    const set = out.get(from) ?? new Set<string>();
    for (const d of deps) if (unit(d) !== from) set.add(unit(d));
    out.set(from, set);
  }
  return new Map([...out].map(([k, v]) => [k, [...v].sort()]));
}

t.test('the folder graph finds an arrow that runs back up', async (t) => {
  const g = new Map([['log.ts', ['vault/card.ts']], ['vault/card.ts', ['errors.ts']], ['vault/service.ts', ['log.ts']], ['errors.ts', []]]);
  t.same(cycles(folderGraph(g)), [['log.ts', 'vault/', 'log.ts']]);
  t.same(cycles(folderGraph(new Map([['vault/a.ts', ['vault/b.ts']], ['vault/b.ts', ['errors.ts']], ['errors.ts', []]]))), []);
});

t.test('no two folders of src/ import each other, directly or around a circle', async (t) => {
  const folders = folderGraph(graph());
  t.ok(folders.size > 15, `the folder graph holds src/'s folders (${folders.size})`);
  const found = cycles(folders).map((c) => c.join(' → '));
  t.same(found, [], found.join('\n'));
});

/** The config's object types: what the compile step (src/model/) turns into the model's domain objects. */
const CONFIG_OBJECT_TYPES = [
  'TenantConfig', 'ApplicationConfig', 'AccessRuleConfig', 'ReactorConfig', 'ProxyConfig', 'RequestTransformConfig', 'ResponseTransformConfig',
];
/** The compile step: src/model/ and the section compilers it calls with a config section. */
const COMPILERS = (file: string) => file.startsWith('model/') || file === 'proxy/compile.ts';

/** Names a file imports from src/config/schema.ts (type-only or not). */
function schemaNames(file: string, text: string): string[] {
  const names: string[] = [];
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  for (const st of sf.statements) {
    if (!ts.isImportDeclaration(st) || !ts.isStringLiteral(st.moduleSpecifier)) continue;
    if (!/\/config\/schema\.js$/.test(st.moduleSpecifier.text)) continue;
    const bindings = st.importClause?.namedBindings;
    if (bindings && ts.isNamedImports(bindings)) names.push(...bindings.elements.map((e) => (e.propertyName ?? e.name).text));
  }
  return names;
}

t.test('the finder sees a config object type imported', async (t) => {
  t.same(schemaNames('x.ts', "import type { ApplicationConfig, Permission } from '../config/schema.js';"), ['ApplicationConfig', 'Permission']);
  t.same(schemaNames('x.ts', "import { type ProxyConfig as P } from './config/schema.js';"), ['ProxyConfig']);
});

/**
 * Issue 25: config types stop at the compiler. The request path works with the model's domain
 * objects (src/auth/tenancy.ts, compiled proxies), so no module outside the compile step names a
 * tenant's, an application's, a proxy's or a reactor's config type.
 */
t.test('config object types are imported only by the compile step', async (t) => {
  const found: string[] = [];
  let importers = 0;
  for (const file of sourceFiles(SRC)) {
    const r = rel(file);
    if (r.startsWith('config/')) continue;
    const names = schemaNames(file, readFileSync(file, 'utf8')).filter((n) => CONFIG_OBJECT_TYPES.includes(n));
    if (names.length === 0) continue;
    importers++;
    if (!COMPILERS(r)) found.push(`${r}: ${names.join(', ')}`);
  }
  t.ok(importers > 0, 'the compile step itself imports them (the finder works on src/)');
  t.same(found, [], found.join('\n'));
});
