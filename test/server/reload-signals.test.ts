/**
 * Issue 31 finding 2, single process: a reload signal is never lost or fatal, whenever it
 * arrives. The service is held while it starts, after it has read its config file: the file's
 * reactor code is a FIFO it blocks on until the test writes it. The file changes, SIGHUP arrives
 * then (the old code died of it: no handler yet), and once started the service serves the new
 * file. `tokenproxy reload` waits for the outcome: exit 0 when applied, 1 when refused.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { call, newKey, opsApp, opsFiles } from '../helpers/ops.js';
import { runCli, startChild } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';

t.setTimeout(300_000);

const root = mkdtempSync(join(tmpdir(), 'tp-reload-signals-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));

/** The pid of the process whose command line names `configPath` (the child we spawned). */
function pidOf(configPath: string): number | undefined {
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0').includes(configPath)) return Number(d);
    } catch {
      // Gone meanwhile.
    }
  }
  return undefined;
}

t.test('SIGHUP while the service starts (after it read the file): not fatal, the new file is served', async (t) => {
  const dir = mkdtempSync(join(root, 'start-'));
  const fifo = join(dir, 'code.fifo');
  t.equal(spawnSync('mkfifo', [fifo]).status, 0, 'mkfifo');
  const files = opsFiles(dir);
  const [a, b] = [newKey(), newKey()];
  files.write([opsApp(1, [a])], { tenant: { reactors: [{ id: 'r', name: 'r', code_file: fifo }] } });
  const starting = startChild(files.path, { TOKENPROXY_MASTER_KEY: files.masterKey }, 180_000);
  let started: Awaited<typeof starting> | undefined;
  t.teardown(async () => {
    if (started) await started.stop();
    else {
      const pid = pidOf(files.path);
      if (pid) process.kill(pid, 'SIGKILL');
    }
  });
  // The open completes once the service opened the FIFO to read it: it has read the config file.
  const writer = await open(fifo, 'w');
  const pid = await waitFor(() => pidOf(files.path), { what: 'the child pid' });
  files.write([opsApp(1, [a]), opsApp(2, [b])]);
  process.kill(pid, 'SIGHUP');
  await writer.write('module.exports = async function () { return { raw: { ok: true } }; };');
  await writer.close();
  started = await starting;
  const svc = started;
  await waitFor(() => svc.output().includes('configuration reloaded'), { what: 'the reload after start', timeoutMs: 60_000 });
  t.equal((await call(svc.url, 'GET', '/tokens', b)).status, 200, 'the key added by the new file is accepted');
  t.equal((await call(svc.url, 'POST', '/reactors/r/react', a, { args: {} })).status, 404, 'the reactor the new file removed is gone');
  t.equal(svc.child.exitCode, null, 'still running');

  // tokenproxy reload: waits for the outcome.
  const c = newKey();
  files.write([opsApp(1, [a]), opsApp(3, [c])]);
  let r = await runCli(['reload', '--config', files.path]);
  t.equal(r.code, 0, r.output);
  t.match(r.output, `sent SIGHUP to process ${svc.child.pid}`);
  t.match(r.output, `process ${svc.child.pid}: serves the new file`);
  // No waiting in the test: the command returned after the service confirmed.
  t.equal((await call(svc.url, 'GET', '/tokens', c)).status, 200, 'the new key at once');
  t.equal((await call(svc.url, 'GET', '/tokens', b)).status, 401, 'the removed key refused at once');

  files.write([opsApp(1, [a]), { ...opsApp(2, [b]), type: 'public', permissions: ['token:read'], rules: [] }]);
  // --pid-file: with --config the command itself would refuse the invalid file before signalling.
  r = await runCli(['reload', '--pid-file', `${dir}/tokenproxy.pid`]);
  t.equal(r.code, 1, 'a refused file: exit 1');
  t.match(r.output, 'refused the file');
  t.equal((await call(svc.url, 'GET', '/tokens', c)).status, 200, 'the running configuration is kept');
  for (const k of [a, b, c]) t.notOk(svc.output().includes(k) || r.output.includes(k), 'no key in the output');

  // --pid alone only signals.
  files.write([opsApp(1, [a]), opsApp(3, [c])]);
  r = await runCli(['reload', '--pid', String(svc.child.pid)]);
  t.equal(r.code, 0, r.output);
  t.match(r.output, 'not waiting for the outcome');
  t.ok(existsSync(`${dir}/tokenproxy.pid.reload`), 'the status file is beside the pid file');
});
