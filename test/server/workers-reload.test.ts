/**
 * Issue 31, `server.workers: 2`:
 * - finding 8: a second start with the same config fails (EADDRINUSE) and leaves the running
 *   service's pid file alone (the old code's failed start removed it);
 * - finding 2: a key revoked by a reload while a worker restarts is refused by every worker. The
 *   restarted worker is held while it starts, after it read its config file (its reactor code is a
 *   FIFO the test writes later); the file changes and `tokenproxy reload` runs then. It waits
 *   until both workers serve the new file, and no worker dies of the reload.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { logLines, onNewConnection, servedBy, workerPids } from '../helpers/cluster.js';
import { newKey, opsApp, opsFiles } from '../helpers/ops.js';
import { runCli, startChild } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';

t.setTimeout(900_000);

const dir = mkdtempSync(join(tmpdir(), 'tp-workers-reload-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

/** A port free a moment ago (a second start must collide with the first on a fixed port). */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const { port } = s.address() as { port: number };
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

const port = await freePort();
const files = opsFiles(dir);
const pidFile = `${dir}/tokenproxy.pid`;
const server = { host: '127.0.0.1', port, pid_file: pidFile, workers: 2 };
const [a, b] = [newKey(), newKey()];
files.write([opsApp(1, [a]), opsApp(2, [b])], { top: { server } });
const env = { TOKENPROXY_MASTER_KEY: files.masterKey, PORT: String(port) };
const svc = await startChild(files.path, env, 240_000);
t.teardown(() => (svc.child.exitCode === null && svc.child.signalCode === null ? svc.kill9() : undefined));
await waitFor(() => workerPids(svc.output()).length === 2, { what: 'both workers listening', timeoutMs: 60_000 });

t.test('a failed second start leaves the running service\'s pid file alone', async (t) => {
  t.equal(readFileSync(pidFile, 'utf8').trim(), String(svc.child.pid), 'the primary wrote its pid');
  const second = await runCli(['--config', files.path], env);
  t.equal(second.code, 1, 'the second start fails');
  t.match(second.output, /EADDRINUSE|a worker exited before all were listening/);
  t.equal(readFileSync(pidFile, 'utf8').trim(), String(svc.child.pid), 'the pid file still names the running primary');
});

t.test('a key revoked while a worker restarts is refused by every worker', async (t) => {
  const fifo = join(dir, 'code.fifo');
  t.equal(spawnSync('mkfifo', [fifo]).status, 0, 'mkfifo');
  // The next worker to start reads a file whose reactor code it blocks on.
  files.write([opsApp(1, [a]), opsApp(2, [b])], { top: { server }, tenant: { reactors: [{ id: 'r', name: 'r', code_file: fifo }] } });
  const [victim] = workerPids(svc.output());
  process.kill(victim!, 'SIGKILL');
  const writer = await open(fifo, 'w'); // the restarted worker has read the file
  files.write([opsApp(1, [a])], { top: { server } }); // b revoked
  const reloading = runCli(['reload', '--config', files.path]);
  await waitFor(() => logLines(svc.output()).some((l) => l.msg === 'reloading every worker'), { what: 'the primary took the reload', timeoutMs: 60_000 });
  await writer.write('module.exports = async function () { return { raw: {} }; };');
  await writer.close();
  const r = await reloading;
  t.equal(r.code, 0, r.output);
  t.match(r.output, /worker 1 \(pid \d+\): serves the new file/);
  t.match(r.output, /worker 2 \(pid \d+\): serves the new file/);

  const pids = new Set<number>();
  for (let i = 0; i < 30; i++) {
    const res = await onNewConnection(svc.url, 'GET', '/tokens', { key: b });
    t.equal(res.status, 401, `request ${i} with the revoked key`);
    pids.add(await servedBy(svc.output, res.reqId));
  }
  t.equal(pids.size, 2, 'both workers answered');
  t.equal((await onNewConnection(svc.url, 'GET', '/tokens', { key: a })).status, 200, 'the kept key works');
  t.equal(logLines(svc.output()).filter((l) => l.msg === 'worker exited; restarting it').length, 1, 'no worker died of the reload');
  t.notOk(svc.output().includes(b) || r.output.includes(b), 'no key in the output');
});
