/**
 * README "Operations" promises no test exercised (issue 30, "Also"):
 *
 * - Reload: "With `--pid` alone it only sends the signal (exit `0` when it was delivered) and the
 *   outcome is in the service log (`configuration reloaded` or `reload refused`)"; exit `1` when
 *   "no process could be signalled".
 * - Pid file: written once the process listens, "removes the file when it exits, only if the file
 *   still holds its own id: a second start with the same config that fails (`EADDRINUSE`) leaves
 *   the running service's file alone".
 * - Shutdown: "the listener stops accepting new connections, idle keep-alive connections are
 *   closed, and requests in flight get `server.shutdown_grace_ms` … to finish".
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { call, count, newKey, opsApp, opsFiles } from '../helpers/ops.js';
import { runCli, startChild } from '../helpers/process.js';
import { KEYS, baseConfig, startTestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

t.setTimeout(400_000);
const root = mkdtempSync(join(tmpdir(), 'tp-promises-ops-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));

t.test('reload --pid signals only (the outcome is in the log); the pid file is left to its owner and removed at exit', async (t) => {
  const dir = mkdtempSync(join(root, 'pid-'));
  const files = opsFiles(dir);
  const pidFile = join(dir, 'tokenproxy.pid');
  const [a, b] = [newKey(), newKey()];
  files.write([opsApp(1, [a])]);
  // A generous start-up bound: the child compiles the TypeScript itself (a loaded CI machine).
  const svc = await startChild(files.path, { TOKENPROXY_MASTER_KEY: files.masterKey }, 180_000);
  let stopped = false;
  t.teardown(() => (stopped ? undefined : svc.stop()));
  const pid = svc.child.pid!;
  t.equal(readFileSync(pidFile, 'utf8').trim(), String(pid), 'the pid file holds the listening process');

  // A second start with the same config on the same port fails and leaves the file alone.
  const second = await runCli(['--config', files.path], { TOKENPROXY_MASTER_KEY: files.masterKey, PORT: new URL(svc.url).port });
  t.equal(second.code, 1, 'a second start on the busy port exits 1');
  t.match(second.output, /EADDRINUSE/);
  t.equal(readFileSync(pidFile, 'utf8').trim(), String(pid), "the running service's pid file is untouched");

  // --pid alone: exit 0 once delivered; the service applies the file (in its log).
  files.write([opsApp(1, [a]), opsApp(2, [b])]);
  let r = await runCli(['reload', '--pid', String(pid)]);
  t.equal(r.code, 0, r.output);
  t.match(r.output, `sent SIGHUP to process ${pid}`);
  t.match(r.output, 'not waiting for the outcome');
  await waitFor(() => count(svc, 'configuration reloaded') === 1, { what: 'configuration reloaded in the log', timeoutMs: 60_000 });
  t.equal((await call(svc.url, 'GET', '/tokens', b)).status, 200, 'the key the new file adds is accepted');

  // An invalid file: still exit 0 (the signal was delivered); the log says it was refused.
  files.write([opsApp(1, [a]), { ...opsApp(2, [b]), type: 'public', permissions: ['token:read'], rules: [] }]);
  r = await runCli(['reload', '--pid', String(pid)]);
  t.equal(r.code, 0, r.output);
  await waitFor(() => count(svc, 'reload refused') === 1, { what: 'reload refused in the log', timeoutMs: 60_000 });
  t.equal((await call(svc.url, 'GET', '/tokens', b)).status, 200, 'the running configuration is kept');

  // No process to signal: exit 1.
  const gone = spawnSync(process.execPath, ['-e', '0']).pid;
  r = await runCli(['reload', '--pid', String(gone)]);
  t.equal(r.code, 1, `a pid that names no process: exit 1 (${r.output.trim()})`);
  t.match(r.output, `cannot signal process ${gone}`);

  t.ok(existsSync(`${pidFile}.reload`), 'the reload status file is beside the pid file');
  await svc.stop();
  stopped = true;
  t.equal(svc.child.exitCode, 0, 'SIGTERM: exit 0');
  t.notOk(existsSync(pidFile), 'the pid file is removed at exit');
  t.notOk(existsSync(`${pidFile}.reload`), 'and the reload status file with it');
  for (const k of [a, b]) t.notOk(svc.output().includes(k) || r.output.includes(k), 'no key in the output');
});

/** A raw connection and everything it has received. */
async function open(url: string): Promise<{ socket: Socket; received: () => string; closed: Promise<void> }> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  await new Promise<void>((res, rej) => {
    socket.once('connect', () => res());
    socket.once('error', rej);
  });
  let data = '';
  socket.on('data', (d: Buffer) => (data += d.toString('latin1')));
  socket.on('error', () => {});
  const closed = new Promise<void>((res) => socket.once('close', () => res()));
  return { socket, received: () => data, closed };
}

t.test('shutdown: an idle keep-alive connection is closed at once, a request in flight still finishes', async (t) => {
  const config = baseConfig();
  config.server = { host: '127.0.0.1', port: 0, shutdown_grace_ms: 120_000 };
  const s = await startTestService(t, { config });

  // An idle keep-alive connection: one request answered, the connection kept.
  const idle = await open(s.url);
  idle.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  await waitFor(() => /\r\n\r\n/.test(idle.received()), { what: 'the /healthz answer' });
  t.match(idle.received(), /^HTTP\/1\.1 200 /);
  t.notMatch(idle.received(), /connection: close/i, 'the connection is kept alive');

  // A request in flight: its headers sent, its body not yet.
  const body = JSON.stringify({ email: 'in-flight@example.com' });
  const busy = await open(s.url);
  // Its headers parsed: the server has the request (a connection without one counts as idle).
  const arrived = new Promise<void>((res) => s.svc.server.once('request', () => res()));
  busy.socket.write(`POST /tokenize HTTP/1.1\r\nHost: x\r\nSVC-API-KEY: ${KEYS.private}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 5)}`);
  await arrived;

  let drained = false;
  const closing = s.svc.close().then(() => (drained = true));
  await idle.closed;
  t.pass('the idle keep-alive connection was closed by the shutdown');
  t.equal(drained, false, 'while the shutdown still waits for the request in flight (grace 120 s)');
  t.notOk(busy.socket.destroyed, 'the connection with a request in flight is open');
  t.equal(busy.received(), '', 'and has no answer yet');

  busy.socket.write(body.slice(5));
  await busy.closed;
  t.match(busy.received(), /^HTTP\/1\.1 200 /, `the request in flight finishes: ${busy.received().split('\r\n')[0]}`);
  t.match(busy.received(), /"email":"[0-9a-f-]{36}"/, 'with its answer');
  await closing;
  t.ok(drained, 'the shutdown ends once the last request is done');
});
