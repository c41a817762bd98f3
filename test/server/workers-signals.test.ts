/**
 * `server.workers: 2`, a second signal: while the workers drain (one holds a request whose body
 * has not all arrived), a second SIGTERM to the primary kills the workers and exits 1 at once.
 */
import t from 'tap';
import { connect } from 'node:net';
import { alive, logLines, startCluster, workerPids } from '../helpers/cluster.js';
import { waitFor } from '../helpers/wait.js';
import { limitedConfig, tenant } from '../rate-limit/http-helpers.js';

t.setTimeout(600_000);

const app = tenant({ apps: [{ kind: 'private' }] });
const svc = await startCluster(t, { ...limitedConfig([app]), rate_limits: { enabled: false }, server: { host: '127.0.0.1', port: 0, shutdown_grace_ms: 600_000 } });

t.test('a second SIGTERM while draining kills the workers and exits 1', async (t) => {
  const pids = workerPids(svc.output());
  // A request in flight: its headers sent, half of its body not.
  const { hostname, port } = new URL(svc.url);
  const socket = connect(Number(port), hostname);
  t.teardown(() => socket.destroy());
  await new Promise<void>((res) => socket.once('connect', () => res()));
  socket.on('error', () => {});
  socket.write(`POST /tokenize HTTP/1.1\r\nhost: x\r\nsvc-api-key: ${app.keys[0][0]}\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n{"a":`);

  svc.child.kill('SIGTERM');
  // One worker drains at once; the one holding the request waits for it (the grace is long).
  await waitFor(() => {
    const lines = logLines(svc.output());
    return pids.every((pid) => lines.some((l) => l.pid === pid && l.msg === 'stopping: draining requests in flight'));
  }, { what: 'both workers draining', timeoutMs: 60_000 });
  t.equal(svc.child.exitCode, null, 'the primary waits for the worker that still has a request');
  const exited = new Promise<number | null>((res) => svc.child.once('exit', (code) => res(code)));
  svc.child.kill('SIGTERM');
  t.equal(await exited, 1, 'the second signal: exit 1');
  await waitFor(() => pids.every((pid) => !alive(pid)), { what: 'the workers gone' });
  t.ok(logLines(svc.output()).some((l) => l.msg === 'second signal while draining: killing the workers, exiting at once'), 'the primary said why');
});
