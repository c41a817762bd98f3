/** token:use (private only) and log:read (management only) are checked when the config loads; verify-audit usage. */
import t from 'tap';
import { runCli, type Io } from '../../src/cli.js';
import { buildConfig, ConfigError } from '../../src/config/load.js';

const TENANT = '77777777-7777-4777-8777-777777777777';
const app = (type: string, permissions: string[], rules: unknown[] = []) => ({
  id: '88888888-8888-4888-8888-888888888888', name: 'a', type, keys: ['config_test_key_aaaaaaaaaaaaaa'], permissions, rules,
});
const load = (a: unknown) => buildConfig({ tenants: [{ id: TENANT, name: 't', applications: [a] }] }, { env: {} });

function problem(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  return '';
}

t.test('token:use only on private applications, log:read only on management ones', async (t) => {
  t.doesNotThrow(() => load(app('private', ['token:use'])));
  t.doesNotThrow(() => load(app('private', [], [{ priority: 1, container: '/pci/', permissions: ['token:use'], transform: 'reveal' }])));
  t.doesNotThrow(() => load(app('management', ['log:read'])));
  t.match(problem(() => load(app('management', ['token:use']))), /applications\[0\]: only a private application may hold "token:use" \(this one is management\)/);
  t.match(problem(() => load(app('management', [], [{ priority: 1, container: '/', permissions: ['token:use'] }]))), /only a private application may hold "token:use"/, 'in a rule too');
  t.match(problem(() => load(app('public', ['token:use']))), /a public application may hold only token:create, token:update, not "token:use"/);
  t.match(problem(() => load(app('private', ['log:read']))), /only a management application may hold "log:read" \(this one is private\)/);
});

t.test('verify-audit: --tenant is required (exit 2); help describes the exit codes', async (t) => {
  let out = '';
  const io: Io = { out: (x) => void (out += x), err: (x) => void (out += x), stdin: () => '' };
  t.equal(await runCli(['verify-audit'], io), 2);
  t.match(out, /--tenant is required/);
  out = '';
  t.equal(await runCli(['verify-audit', '--tenant'], io), 2, 'an option without its value');
  out = '';
  t.equal(await runCli(['verify-audit', '--help'], io), 0);
  t.match(out, /Exit 0: the chain is intact; 1: it is broken/);
  out = '';
  t.equal(await runCli(['verify-audit', '--tenant', TENANT, '--config', '/nonexistent/tokenproxy.yaml'], io), 1, 'a config that cannot be read');
});
