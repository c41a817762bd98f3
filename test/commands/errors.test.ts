/**
 * Issue 29 ("errors that say what to do") outside HTTP, each on its exact text: a config file
 * that is not YAML shows the line with a caret (and only the shape of the line: a key written on
 * it stays out of stderr and of the reload log); verify-audit on a tenant that is not in the
 * config exits 2 naming it; a master key that is not the store's says where the key was read
 * from and which setting names the store, at start-up and in verify-audit.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli, type Io } from '../../src/cli.js';
import { buildConfig } from '../../src/config/load.js';
import { maskLine } from '../../src/config/yaml-error.js';
import { masterKeyId } from '../../src/crypto/keyring.js';
import { createLogger } from '../../src/log.js';
import { startService } from '../../src/server.js';
import { writeConfig } from '../helpers/process.js';
import { baseConfig, startTestService } from '../helpers/service.js';

const dir = mkdtempSync(join(tmpdir(), 'tp-cli-errors-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

async function inProcess(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const io: Io = { out: (x) => void (stdout += x), err: (x) => void (stderr += x), stdin: () => '' };
  const code = await runCli(args, io);
  return { code, stdout, stderr };
}

/** check-config on a file holding `text`. */
async function checkYaml(name: string, text: string) {
  const path = join(dir, name);
  writeFileSync(path, text);
  return { path, ...(await inProcess(['check-config', '--config', path])) };
}

t.test('a YAML syntax error: file:line:column, the reason, the line with a caret', async (t) => {
  const r = await checkYaml('nested.yaml', 'server:\n  port: 8080\n  host: a: b\n');
  t.equal(r.code, 1);
  t.equal(r.stderr, [
    `tokenproxy: invalid configuration:`,
    `  ${r.path}:3:9: not valid YAML or JSON: Nested mappings are not allowed in compact mappings`,
    `    3 |   host: *: *`,
    `      |         ^`,
    '',
  ].join('\n'));

  const tab = await checkYaml('tab.yaml', 'server:\n\tport: 8080\n');
  t.equal(tab.stderr, [
    `tokenproxy: invalid configuration:`,
    `  ${tab.path}:2:1: not valid YAML or JSON: Tabs are not allowed as indentation`,
    `    2 | \tport: ****`,
    `      | ^`,
    '',
  ].join('\n'));

  const json = await checkYaml('flow.json', '{"server": {"port": 8080,, "host": "x"}}');
  t.equal(json.stderr, [
    `tokenproxy: invalid configuration:`,
    `  ${json.path}:1:26: not valid YAML or JSON: Unexpected , in flow map`,
    `    1 | {"******": {"****": ****,, "****": "*"}}`,
    `      |                          ^`,
    '',
  ].join('\n'), 'JSON: a line that starts with { shows only its punctuation');
});

t.test('two documents, and an alias without its anchor', async (t) => {
  const two = await checkYaml('two.yaml', 'server:\n  port: 8080\n---\nlog:\n  level: info\n');
  t.equal(two.stderr, [
    `tokenproxy: invalid configuration:`,
    `  ${two.path}:3:1: not valid YAML or JSON: the file holds more than one YAML document (a second ---); the config is one document`,
    `    3 | ---`,
    `      | ^`,
    '',
  ].join('\n'));
  const alias = await checkYaml('alias.yaml', 'server: *defaults\n');
  t.equal(alias.code, 1);
  t.equal(alias.stderr, `tokenproxy: invalid configuration:\n  ${alias.path}: not valid YAML or JSON: an alias (*name) names an anchor (&name) that is not set before it\n`);
});

t.test('the line shows its shape, not its values: a key on it stays out of stderr and of the reload log', async (t) => {
  const secret = 'sk_live_0123456789abcdefghij';
  const text = `tenants:\n  - id: x\n    applications:\n      - keys: ${secret}: x\n        name: "a\\qb"\n`;
  const r = await checkYaml('secret.yaml', text);
  t.equal(r.code, 1);
  t.notOk(r.stderr.includes('sk_live'), r.stderr);
  t.match(r.stderr, `${r.path}:4:15: not valid YAML or JSON: Nested mappings are not allowed in compact mappings\n    4 |       - keys: ${'*'.repeat(secret.length)}: *\n`, 'the shape of the line');
  t.match(r.stderr, `${r.path}:5:17: not valid YAML or JSON: Invalid escape sequence in a double-quoted string\n    5 |         name: "****"\n`, "yaml's message that quotes the file is cut to its fixed words");
  t.notMatch(r.stderr, /\\q/);

  // The same file on a reload: refused, the problems logged without the key.
  const path = join(dir, 'reload.yaml');
  const config = buildConfig({ ...baseConfig(), store: { kind: 'embedded', path: join(dir, 'reload.db') } }, { source: path, env: { TOKENPROXY_MASTER_KEY: randomBytes(32).toString('base64') } });
  writeFileSync(path, text);
  const lines: string[] = [];
  const svc = await startService(config, { log: createLogger('info', { write: (x: string) => void lines.push(x) } as never) });
  t.teardown(() => svc.close());
  const outcome = await svc.reload();
  t.equal(outcome.applied, false);
  t.match(outcome.problems[0], /:4:\d+: not valid YAML or JSON: /);
  t.match(lines.join(''), /reload refused/);
  t.notOk(lines.join('').includes('sk_live'), 'the key is not in the log');
});

t.test('maskLine keeps indentation, "- ", the member name and punctuation; one * per other character', async (t) => {
  t.equal(maskLine('  - name: "café au lait" # old: p4ss'), '  - name: "**** ** ****" # ***: ****');
  t.equal(maskLine('password: hunter2'), 'password: *******');
  t.equal(maskLine('url: redis://u:pw@host:6379/0'), 'url: *****:***:*******:******');
  t.equal(maskLine('- plain-value-without-key'), `- ${'*'.repeat(23)}`);
  t.equal(maskLine("'quoted key': [a, {b: c}]"), "'quoted key': [*, {*: *}]");
});

t.test('a long line is shown as a window around the column', async (t) => {
  const long = `a: [${'x,'.repeat(200)}}${',x'.repeat(100)}]\n`;
  const r = await checkYaml('long.yaml', long);
  const lines = r.stderr.split('\n');
  t.equal(lines[1], `  ${r.path}:1:405: not valid YAML or JSON: Flow sequence in block collection must be sufficiently indented and end with a ]`);
  t.equal(lines[2], `    1 | …${'*,'.repeat(30)}}${',*'.repeat(29)},…`);
  t.equal(lines[3], `      | ${' '.repeat(61)}^`);
});

t.test('verify-audit on a tenant that is not in the config: exit 2 naming it', async (t) => {
  const config = writeConfig(dir, { ...baseConfig(), store: { kind: 'embedded', path: join(dir, 'none.db') } }, 'verify.json');
  const typo = '11111111-1111-4111-8111-11111111111x';
  const r = await inProcess(['verify-audit', '--tenant', typo, '--config', config]);
  t.equal(r.code, 2);
  t.equal(r.stdout, '');
  t.equal(r.stderr, `tokenproxy verify-audit: tenant "${typo}" is not in the configuration ${config}\n`);
});

t.test('a master key that is not the store\'s: where it was read from, which setting names the store', async (t) => {
  const dataDir = mkdtempSync(join(dir, 'mismatch-'));
  const first = randomBytes(32);
  const other = randomBytes(32);
  const s = await startTestService(t, { dataDir, masterKey: first.toString('base64') });
  await s.svc.close();
  const store = join(dataDir, 'tokens.db');
  const ids = `data key k1 was wrapped by master key ${masterKeyId(first)}, this master key is ${masterKeyId(other)}`;
  await t.rejects(startTestService(t, { dataDir, masterKey: other.toString('base64') }), {
    name: 'MasterKeyMismatchError',
    message: `the master key does not match the store: ${ids}. The master key was read from TOKENPROXY_MASTER_KEY (which takes precedence over secrets.master_key_file and the development key): check that it holds the key this store was first used with, or that store.path (${store}) names the store this key belongs to`,
  });

  // Neither the variable nor a key file: the development key, created beside the store (the first-hour case reversed).
  const devConfig = buildConfig({ ...baseConfig(), store: { kind: 'embedded', path: store } }, { env: {} });
  const devError = await startService(devConfig, { log: createLogger('silent') }).then(
    async (svc) => {
      await svc.close();
      return null;
    },
    (err: unknown) => err as Error,
  );
  const devKey = Buffer.from(readFileSync(join(dataDir, 'master.key'), 'utf8').trim(), 'base64');
  t.equal(devError?.message, `the master key does not match the store: data key k1 was wrapped by master key ${masterKeyId(first)}, this master key is ${masterKeyId(devKey)}. The master key was read from the development master key ${join(dataDir, 'master.key')} (neither TOKENPROXY_MASTER_KEY nor secrets.master_key_file is set): check that it holds the key this store was first used with, or that store.path (${store}) names the store this key belongs to`);

  const keyFile = join(dir, 'other.key');
  writeFileSync(keyFile, other.toString('base64'), { mode: 0o600 });
  const config = writeConfig(dir, { ...baseConfig(), store: { kind: 'embedded', path: store }, secrets: { master_key_file: keyFile } }, 'mismatch.json');
  const saved = process.env.TOKENPROXY_MASTER_KEY;
  delete process.env.TOKENPROXY_MASTER_KEY;
  t.teardown(() => {
    if (saved !== undefined) process.env.TOKENPROXY_MASTER_KEY = saved;
  });
  const r = await inProcess(['rotate-data-key', '--config', config]);
  t.equal(r.code, 1);
  t.equal(r.stderr, `tokenproxy rotate-data-key: the master key does not match the store: ${ids}. The master key was read from the file ${keyFile} (secrets.master_key_file): check that it holds the key this store was first used with, or that store.path (${store}) names the store this key belongs to\n`);
  const v = await inProcess(['verify-audit', '--tenant', '11111111-1111-4111-8111-111111111111', '--config', config]);
  t.equal(v.code, 1);
  t.equal(v.stderr, `tokenproxy verify-audit: the master key (id ${masterKeyId(other)}) is not the one this store's data keys were wrapped with. The master key was read from the file ${keyFile} (secrets.master_key_file): check that it holds the key this store was first used with, or that store.path (${store}) names the store this key belongs to\n`);
});
