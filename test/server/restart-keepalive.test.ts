/**
 * A graceful stop drops nothing on keep-alive connections: the real service under load (POST
 * /tokenize in a loop on keep-alive connections, on the public listener and /metrics on the
 * admin listener) gets SIGTERM. Every request either got its whole answer or was never sent (its
 * connection was refused: the listener had stopped); none is reset or closed unanswered, where
 * the client could not tell whether its token was made. Each connection's last answer said
 * `Connection: close`. The same with `server.workers: 2`. An idle keep-alive connection does
 * not hold the stop until the grace runs out.
 *
 * bench/restarts.ts measures the same over three restarts.
 */
import t, { type Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startChild, writeConfig, type ChildService } from '../helpers/process.js';
import { baseConfig, KEYS } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

const dir = mkdtempSync(join(tmpdir(), 'tp-restart-keepalive-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const MASTER_KEY = Buffer.alloc(32, 9).toString('base64');
const BODY = JSON.stringify('customer-1-value');
/** Keep-alive connections on the public listener (and a quarter of that on the admin listener). */
const CONNECTIONS = 12;

async function service(t: Test, name: string, server: Record<string, unknown>): Promise<{ svc: ChildService; adminUrl: string }> {
  const cfg = baseConfig() as { server: Record<string, unknown>; store?: unknown };
  // A grace far beyond the test's bounds: a stop that waits for it is a failure, not a slow pass.
  cfg.server = { ...cfg.server, admin: { port: 0 }, shutdown_grace_ms: 60_000, ...server };
  cfg.store = { kind: 'embedded', path: join(dir, `${name}.db`) };
  const svc = await startChild(writeConfig(dir, cfg, `${name}.json`), { TOKENPROXY_MASTER_KEY: MASTER_KEY }, 120_000);
  t.teardown(() => svc.kill9());
  // The single process names its admin listener in its "listening" line; a cluster's primary does
  // not (each worker logs "worker listening" with it).
  const adminUrl = await waitFor(() => /"metrics":"(http:\/\/[^"]+)"/.exec(svc.output())?.[1], { what: 'the admin listener URL', timeoutMs: 60_000 });
  return { svc, adminUrl };
}

function exitOf(svc: ChildService): Promise<number | null> {
  const { child } = svc;
  return child.exitCode !== null || child.signalCode !== null ? Promise.resolve(child.exitCode) : new Promise((r) => child.once('exit', (code) => r(code)));
}

interface Tally {
  answered: number;
  /** Whole answers that said `Connection: close`. */
  closing: number;
  notOk: string[];
  /** Refused: the request never reached the service. */
  neverSent: number;
  /** Reset, or closed before the whole answer: the request may or may not have been served. */
  dropped: string[];
}

/** One request on the keep-alive agent; resolves with how it ended. */
function once(agent: Agent, url: string, path: string, tally: Tally): Promise<'answered' | 'refused' | 'dropped'> {
  const { hostname, port } = new URL(url);
  const post = path === '/tokenize';
  return new Promise((resolve) => {
    let ended = false;
    const fail = (err: NodeJS.ErrnoException): void => {
      if (ended) return;
      ended = true;
      if (err.code === 'ECONNREFUSED') {
        tally.neverSent++;
        resolve('refused');
      } else {
        tally.dropped.push(`${path}: ${err.code ?? ''} ${err.message}${req.reusedSocket ? ' (on a reused connection)' : ''}`);
        resolve('dropped');
      }
    };
    const headers: Record<string, string | number> = post ? { 'content-type': 'application/json', 'svc-api-key': KEYS.private, 'content-length': Buffer.byteLength(BODY) } : {};
    const req = request({ host: hostname, port: Number(port), path, method: post ? 'POST' : 'GET', agent, headers }, (res) => {
      res.resume();
      res.on('error', fail);
      res.on('end', () => {
        if (ended) return;
        ended = true;
        tally.answered++;
        if (res.headers.connection === 'close') tally.closing++;
        if (res.statusCode !== 200) tally.notOk.push(`${path}: ${res.statusCode}`);
        resolve('answered');
      });
    });
    req.on('error', fail);
    req.end(post ? BODY : undefined);
  });
}

/**
 * `n` loops sending one request after the other on an agent of `n` keep-alive connections, until
 * their request is refused once `stopped()` (the service has exited).
 */
function load(url: string, path: string, n: number, stopped: () => boolean): { tally: Tally; done: Promise<void> } {
  const agent = new Agent({ keepAlive: true, maxSockets: n });
  const tally: Tally = { answered: 0, closing: 0, notOk: [], neverSent: 0, dropped: [] };
  const loop = async (): Promise<void> => {
    for (;;) {
      const outcome = await once(agent, url, path, tally);
      if (outcome !== 'answered' && stopped()) return;
      // Refused while the service still runs (it is stopping): do not spin.
      if (outcome === 'refused') await new Promise((r) => setTimeout(r, 20));
    }
  };
  const done = Promise.all(Array.from({ length: n }, loop)).then(() => agent.destroy());
  return { tally, done };
}

function check(t: Test, what: string, tally: Tally, connections: number): void {
  t.same(tally.dropped, [], `${what}: no request was reset or closed unanswered`);
  t.same(tally.notOk, [], `${what}: every answer was a 200`);
  t.ok(tally.closing >= 1 && tally.closing <= connections, `${what}: the last answer on a connection said Connection: close (${tally.closing} of ${connections} connections)`);
  t.comment(`${what}: ${tally.answered} answered, ${tally.neverSent} never sent (refused), ${tally.dropped.length} dropped`);
}

async function stopUnderLoad(t: Test, name: string, server: Record<string, unknown>): Promise<void> {
  const { svc, adminUrl } = await service(t, name, server);
  let exited = false;
  const exit = exitOf(svc).then((code) => {
    exited = true;
    return code;
  });
  const adminConnections = Math.max(1, CONNECTIONS / 4);
  const pub = load(svc.url, '/tokenize', CONNECTIONS, () => exited);
  const admin = load(adminUrl, '/metrics', adminConnections, () => exited);
  // Every connection open and busy before the signal.
  await waitFor(() => pub.tally.answered >= CONNECTIONS * 20 && admin.tally.answered >= adminConnections * 20, { what: 'the load on every connection', timeoutMs: 60_000 });
  t.same([...pub.tally.dropped, ...admin.tally.dropped], [], 'nothing dropped before the signal');
  svc.child.kill('SIGTERM');
  // Bounded: a stop that waited for the 60 s grace would fail here.
  const code = await Promise.race([exit, new Promise<string>((r) => setTimeout(() => r('still running after 30 s'), 30_000))]);
  t.equal(code, 0, 'the service drained and exited 0');
  await Promise.all([pub.done, admin.done]);
  check(t, 'POST /tokenize', pub.tally, CONNECTIONS);
  check(t, 'GET /metrics (admin listener)', admin.tally, adminConnections);
}

t.test('SIGTERM under load on keep-alive connections: every request answered or never sent', async (t) => {
  await stopUnderLoad(t, 'single', {});
});

t.test('the same with server.workers: 2', async (t) => {
  await stopUnderLoad(t, 'workers', { workers: 2 });
});

t.test('an idle keep-alive connection is closed by the stop, which does not wait for the grace', async (t) => {
  const { svc } = await service(t, 'idle', {});
  const { hostname, port } = new URL(svc.url);
  const socket = connect(Number(port), hostname);
  let text = '';
  socket.setEncoding('utf8').on('data', (d: string) => (text += d));
  const closed = new Promise<void>((r) => socket.on('close', () => r()));
  socket.on('error', () => undefined);
  socket.write(`GET /healthz HTTP/1.1\r\nHost: ${hostname}\r\n\r\n`);
  await waitFor(() => /\r\n\r\n/.test(text), { what: 'the answer' });
  t.match(text, /^HTTP\/1\.1 200 /);
  t.match(text, /connection: keep-alive/i, 'the connection is kept alive');
  const exit = exitOf(svc);
  svc.child.kill('SIGTERM');
  const code = await Promise.race([exit, new Promise<string>((r) => setTimeout(() => r('still running after 30 s'), 30_000))]);
  t.equal(code, 0, 'exited 0, well before the 60 s grace');
  await closed;
  t.pass('the idle connection was closed');
});
