/**
 * Live reload (issue 13), on the real CLI run as a child process and signalled for real: a key
 * removed from the file is refused on the next request and an added one accepted; an invalid file
 * keeps the running model and every problem is logged; a setting that needs a restart is named and
 * the rest still applies; `tokenproxy reload` finds the process through server.pid_file.
 * Reactors and reloads under load: reload-live.test.ts.
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { call, count, hup, newKey, opsApp, opsChild as child, opsFiles } from '../helpers/ops.js';
import { runCli } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';

const root = mkdtempSync(join(tmpdir(), 'tp-reload-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const mk = (prefix: string) => mkdtempSync(join(root, prefix));

t.test('keys: removed is refused, added is accepted, on the next request', async (t) => {
  const files = opsFiles(mk('keys-'));
  const [a, b, c] = [newKey(), newKey(), newKey()];
  files.write([opsApp(1, [a]), opsApp(2, [b])]);
  const svc = await child(t, files);
  t.equal((await call(svc.url, 'GET', '/tokens', b)).status, 200, 'b works before');
  t.equal((await call(svc.url, 'GET', '/tokens', c)).status, 401, 'c is unknown before');

  files.write([opsApp(1, [a]), opsApp(3, [c])]);
  const out = await hup(svc);
  t.match(out, 'configuration reloaded');
  t.equal((await call(svc.url, 'GET', '/tokens', b)).status, 401, 'b is refused after the reload');
  t.equal((await call(svc.url, 'GET', '/tokens', b)).body.code, 'invalid_api_key');
  t.equal((await call(svc.url, 'GET', '/tokens', c)).status, 200, 'c is accepted after the reload');
  t.equal((await call(svc.url, 'GET', '/tokens', a)).status, 200, 'a kept working');

  // `tokenproxy reload` finds the process by the config's server.pid_file.
  files.write([opsApp(1, [a]), opsApp(2, [b])]);
  const before = count(svc, 'configuration reloaded');
  const r = await runCli(['reload', '--config', files.path]);
  t.equal(r.code, 0, r.output);
  t.match(r.output, `sent SIGHUP to process ${svc.child.pid}`);
  await waitFor(() => count(svc, 'configuration reloaded') > before, { what: 'reload by the CLI', timeoutMs: 30_000 });
  t.equal((await call(svc.url, 'GET', '/tokens', b)).status, 200, 'b is back');
  t.equal((await call(svc.url, 'GET', '/tokens', c)).status, 401, 'c is gone');
  for (const k of [a, b, c]) t.notOk(svc.output().includes(k), 'no key in the log');
});

t.test('an invalid file keeps the running model and logs every problem', async (t) => {
  const files = opsFiles(mk('invalid-'));
  const [a, b] = [newKey(), newKey()];
  files.write([opsApp(1, [a])]);
  const svc = await child(t, files);
  // Three problems in one file: two the loader finds (a public key holding token:read, a
  // duplicate proxy id) and one of src/proxy/ (a bad JSON pointer), which the loader runs
  // through the model's checks: all three are logged.
  const proxy = (pointer: string) => ({ id: 'p', name: 'p', key: newKey(), destination_url: 'http://127.0.0.1:9', require_auth: false,
    request_transforms: [{ type: 'tokenize', fields: [{ pointer, token: { type: 'token' } }] }] });
  files.write([opsApp(1, [a]), { ...opsApp(2, [b]), type: 'public', permissions: ['token:read'], rules: [] }], {
    tenant: { proxies: [proxy('no-slash'), proxy('/x')] },
  });
  const out = await hup(svc);
  t.match(out, 'reload refused');
  t.match(out, 'tenants[0].applications[1]: a public application may hold only');
  t.match(out, 'tenants[0].proxies[1].id: duplicate proxy id');
  t.match(out, 'tenants[0].proxies[0].request_transforms[0].fields[0].pointer: not a valid JSON pointer');
  t.equal((await call(svc.url, 'GET', '/tokens', a)).status, 200, 'the old key still works');
  t.equal((await call(svc.url, 'GET', '/tokens', b)).status, 401, 'the new one is not in use');
  t.notOk(svc.output().includes(b), 'no key in the log');
  // The file fixed: the reload applies.
  files.write([opsApp(1, [a]), opsApp(2, [b])]);
  t.match(await hup(svc), 'configuration reloaded');
  t.equal((await call(svc.url, 'GET', '/tokens', b)).status, 200);
});

t.test('settings that need a restart are named; the rest applies', async (t) => {
  const files = opsFiles(mk('restart-'));
  const [a, b] = [newKey(), newKey()];
  files.write([opsApp(1, [a])]);
  const svc = await child(t, files);
  files.write([opsApp(1, [a]), opsApp(2, [b])], { top: { server: { host: '127.0.0.1', port: 0, pid_file: `${files.dir}/tokenproxy.pid`, body_limit_bytes: 1000 }, log: { level: 'warn' } } });
  const out = await hup(svc);
  t.match(out, 'configuration reloaded');
  t.match(out, /"setting":"server.body_limit_bytes"[^\n]*applies only after a restart/);
  t.match(out, /"setting":"log"[^\n]*applies only after a restart/);
  t.notMatch(out, /"setting":"server.port"/, 'an unchanged setting is not named');
  t.equal((await call(svc.url, 'GET', '/tokens', b)).status, 200, 'the new key applies');
  // The running body limit (5 MB) is kept: a body above the file's 1000 bytes is still accepted.
  const big = await call(svc.url, 'POST', '/tokens', a, { type: 'token', data: 'x'.repeat(5000) });
  t.equal(big.status, 201, 'the body limit did not change');
});

t.test('tokenproxy reload without a process to signal: exit 1 and why', async (t) => {
  const dir = mk('cli-');
  const noPidFile = join(dir, 'no-pid.json');
  writeFileSync(noPidFile, JSON.stringify({ server: { port: 0 } }));
  let r = await runCli(['reload', '--config', noPidFile]);
  t.equal(r.code, 1);
  t.match(r.output, 'give --pid or --pid-file, or set server.pid_file in the config');
  r = await runCli(['reload', '--pid-file', join(dir, 'missing.pid')]);
  t.equal(r.code, 1);
  t.match(r.output, /cannot read the pid file .*missing\.pid \(ENOENT\); is the service running\?/);
  writeFileSync(join(dir, 'bad.pid'), 'not a pid\n');
  r = await runCli(['reload', '--pid-file', join(dir, 'bad.pid')]);
  t.equal(r.code, 1);
  t.match(r.output, 'does not hold a process id');
  t.notMatch(r.output, /\n\s+at /, 'no stack trace');
});
