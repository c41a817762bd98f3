/**
 * What the tool commands load: `--version`, `--help`, `help COMMAND`, `gen-key`, `gen-master-key`
 * and `hash-key` read no config, so they load none of the config's, the model's or the service's
 * packages (zod, yaml, liquidjs, pino, the store and HTTP clients). With them, `tokenproxy --version`
 * took about 0.46 s; without them about 0.18 s (a bare `node -e 0`: 0.12 s).
 *
 * Each command runs as a real child process (the CLI as the other command tests start it) with an
 * ES module resolve hook (node:module register, through NODE_OPTIONS) that writes every URL the
 * process resolves to a file; `check-config` is the control: it must be seen loading zod and yaml.
 */
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { spawnCli } from '../helpers/cli-entry.js';

const dir = mkdtempSync(join(tmpdir(), 'tp-cli-imports-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const WATCHED = ['zod', 'yaml', 'liquidjs', 'pino', 'ioredis', 'pg', 'undici', 'json-ptr'];

writeFileSync(join(dir, 'hooks.mjs'), `
import { appendFileSync } from 'node:fs';
let file;
export function initialize(data) { file = data.file; }
export async function resolve(specifier, context, next) {
  const result = await next(specifier, context);
  appendFileSync(file, result.url + '\\n');
  return result;
}
`);

let runs = 0;

/** Runs `tokenproxy ARGS`; its exit code, its stdout, and the packages of WATCHED it resolved. */
function loads(args: string[], stdin = ''): Promise<{ code: number | null; stdout: string; stderr: string; packages: string[] }> {
  const log = join(dir, `resolved-${++runs}.txt`);
  writeFileSync(log, '');
  const register = join(dir, `register-${runs}.mjs`);
  writeFileSync(register, `
import { register } from 'node:module';
register(${JSON.stringify(pathToFileURL(join(dir, 'hooks.mjs')).href)}, { data: { file: ${JSON.stringify(log)} } });
`);
  const nodeOptions = [process.env.NODE_OPTIONS ?? '', `--import=${pathToFileURL(register).href}`].join(' ').trim();
  return new Promise((resolve) => {
    const child = spawnCli(args, { ...process.env, NODE_OPTIONS: nodeOptions }, { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('exit', (code) => {
      const urls = readFileSync(log, 'utf8').split('\n').filter(Boolean);
      const packages = WATCHED.filter((p) => urls.some((u) => u.includes(`/node_modules/${p}/`)));
      resolve({ code, stdout, stderr, packages });
    });
    child.stdin!.end(stdin);
  });
}

const version = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

t.test('the probe sees what check-config loads (zod and yaml)', async (t) => {
  const r = await loads(['check-config', '--config', 'config/tokenproxy.yaml']);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /: OK \(/);
  t.ok(r.packages.includes('zod') && r.packages.includes('yaml'), `zod and yaml resolved (${r.packages.join(', ')})`);
});

const TOOL_COMMANDS: { args: string[]; stdin?: string; out: RegExp }[] = [
  { args: ['--version'], out: new RegExp(`^${version.replace(/\./g, '\\.')}\\n$`) },
  { args: ['--help'], out: /\n {2}migrate {2,}convert the store/ },
  { args: ['help', 'migrate'], out: /^tokenproxy migrate \[--dry-run\] \[--batch N\]/ },
  { args: ['migrate', '--help'], out: /-b, --batch N {7}tokens a step \(default 1000, at most 100,000\)/ },
  { args: ['gen-key', '--type', 'proxy'], out: /^tp_proxy_[A-Za-z0-9_-]{43}\nkey_sha256: "[0-9a-f]{64}"\n$/ },
  { args: ['gen-master-key'], out: /^[A-Za-z0-9+/]{43}=\n$/ },
  { args: ['hash-key'], stdin: 'k'.repeat(32), out: /^\{ sha256: "[0-9a-f]{64}" \}\n$/ },
];

for (const c of TOOL_COMMANDS) {
  t.test(`tokenproxy ${c.args.join(' ')} loads none of ${WATCHED.join(', ')}`, async (t) => {
    const r = await loads(c.args, c.stdin);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, c.out, 'its answer');
    t.same(r.packages, [], 'none resolved');
  });
}
