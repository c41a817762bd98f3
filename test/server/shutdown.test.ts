/**
 * Graceful shutdown of the real process (issue 13): on SIGTERM /readyz answers 503 at once, the
 * listener stops accepting, a request in flight (held by a slow upstream) finishes and the process
 * exits 0; past server.shutdown_grace_ms the request is cut; a second signal exits 1 at once.
 */
import t, { type Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startChild, writeConfig, type ChildService } from '../helpers/process.js';
import { configWithProxies, PROXY_KEY } from '../helpers/proxy.js';
import { KEYS } from '../helpers/service.js';
import { startUpstream, type Upstream } from '../helpers/upstream.js';

const dir = mkdtempSync(join(tmpdir(), 'tp-shutdown-'));
const MASTER_KEY = Buffer.alloc(32, 7).toString('base64');

/**
 * issue 30: the output is scanned for the secrets this file really uses: the proxy key every test
 * sends, the master key it starts the service with, and the API keys in its config.
 */
function noSecretInOutput(t: Test, svc: ChildService): void {
  const out = svc.output();
  t.ok(out.length > 0, 'the output was captured');
  const secrets: Array<[string, string]> = [['the proxy key', PROXY_KEY], ['the master key', MASTER_KEY], ...Object.entries(KEYS).map(([k, v]): [string, string] => [`the ${k} API key`, v])];
  for (const [what, value] of secrets) t.notOk(out.includes(value), `${what} is not in the output`);
}
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

/** An upstream whose answers wait until the test releases them. */
async function heldUpstream(t: Parameters<typeof startUpstream>[0]): Promise<{ upstream: Upstream; arrived: Promise<void>; release: () => void }> {
  const upstream = await startUpstream(t);
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let arrived!: () => void;
  const arrival = new Promise<void>((r) => (arrived = r));
  upstream.respond(async (_req, res) => {
    arrived();
    await released;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"slow":"done"}');
  });
  t.teardown(() => release());
  return { upstream, arrived: arrival, release };
}

async function service(t: Parameters<typeof startUpstream>[0], name: string, upstream: Upstream, graceMs: number): Promise<ChildService> {
  const cfg = configWithProxies(
    [{ id: 'slow', name: 'slow', key: PROXY_KEY, destination_url: upstream.url, require_auth: false, timeout_ms: 30_000 }],
    [],
    { shutdown_grace_ms: graceMs },
  );
  cfg.store = { kind: 'embedded', path: join(dir, `${name}.db`) };
  const svc = await startChild(writeConfig(dir, cfg, `${name}.json`), { TOKENPROXY_MASTER_KEY: MASTER_KEY });
  t.teardown(() => svc.kill9());
  return svc;
}

/** A raw keep-alive connection: several requests written at once (pipelined), every byte read. */
function rawConnection(url: string): Promise<{ socket: Socket; text: () => string; closed: Promise<void> }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => resolve({ socket, text: () => data, closed }));
    let data = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (data += d));
    const closed = new Promise<void>((r) => socket.on('close', () => r()));
    socket.on('error', reject);
  });
}

function exitOf(svc: ChildService): Promise<number | null> {
  const { child } = svc;
  return child.exitCode !== null ? Promise.resolve(child.exitCode) : new Promise((r) => child.once('exit', (code) => r(code)));
}

async function until(cond: () => boolean, what: string, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

t.test('SIGTERM: /readyz 503 at once, no new connections, the request in flight finishes, exit 0', async (t) => {
  const { upstream, arrived, release } = await heldUpstream(t);
  const svc = await service(t, 'drain', upstream, 20_000);
  const before = await fetch(`${svc.url}/readyz`);
  t.equal(before.status, 200, 'ready before the signal');

  // One connection: a slow proxied request; once it is in flight, the signal; then /readyz on the
  // same connection (a busy connection is not closed by the drain; a new one is refused).
  const conn = await rawConnection(svc.url);
  const host = new URL(svc.url).host;
  conn.socket.write(`GET /proxy/slow HTTP/1.1\r\nHost: ${host}\r\nSVC-PROXY-KEY: ${PROXY_KEY}\r\n\r\n`);
  await arrived;
  const exited = exitOf(svc);
  svc.child.kill('SIGTERM');
  // The line is logged in the same tick as the drain starts, so /readyz sent after it sees it.
  await until(() => svc.output().includes('stopping: draining requests in flight'), 'the stopping log line');
  conn.socket.write(`GET /readyz HTTP/1.1\r\nHost: ${host}\r\n\r\n`);

  // A new connection (fetch could reuse its keep-alive connection from above, which a request
  // may still use while the service drains).
  const refused = await new Promise<string>((resolve) => {
    const { hostname, port } = new URL(svc.url);
    const s = connect(Number(port), hostname, () => {
      s.destroy();
      resolve('connected');
    });
    s.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
  t.equal(refused, 'ECONNREFUSED', 'the listener no longer accepts');
  t.equal(svc.child.exitCode, null, 'still running while a request is in flight');
  // Node parses the pipelined /readyz as soon as it arrives and holds its answer until the slow
  // one is written; give the otherwise idle process a moment to read it before the release
  // (released first, the connection would be idle and closed before /readyz arrived).
  await new Promise((r) => setTimeout(r, 1000));

  release();
  await conn.closed;
  const text = conn.text();
  const [first, second] = text.split(/(?=HTTP\/1\.1 )/);
  t.match(first, /^HTTP\/1\.1 200 /, 'the request in flight got its answer');
  t.match(first, /\{"slow":"done"\}/);
  t.match(second, /^HTTP\/1\.1 503 /, '/readyz behind it answered 503');
  t.match(second, /"code":"shutting_down"/);
  // Only the last answer on the connection closes it: the one before it keeps the connection
  // open for the request behind it.
  t.notMatch(first, /\r\nconnection: close\r\n/i, 'the answer in flight did not close the connection: a request was behind it');
  t.match(second, /\r\nconnection: close\r\n/i, 'the last answer said Connection: close');
  t.equal(await exited, 0, 'exit code 0');
  t.notMatch(svc.output(), /second signal/);
  noSecretInOutput(t, svc);
});

t.test('past shutdown_grace_ms the request in flight is cut, and the process still exits 0', async (t) => {
  const { upstream, arrived } = await heldUpstream(t);
  const svc = await service(t, 'grace', upstream, 300);
  const conn = await rawConnection(svc.url);
  conn.socket.write(`GET /proxy/slow HTTP/1.1\r\nHost: ${new URL(svc.url).host}\r\nSVC-PROXY-KEY: ${PROXY_KEY}\r\n\r\n`);
  await arrived;
  const exited = exitOf(svc);
  svc.child.kill('SIGTERM');
  await conn.closed;
  t.equal(conn.text(), '', 'the connection was closed without an answer (the upstream never answered)');
  t.equal(await exited, 0);
  noSecretInOutput(t, svc);
});

t.test('a second signal while draining exits 1 at once', async (t) => {
  const { upstream, arrived } = await heldUpstream(t);
  const svc = await service(t, 'twice', upstream, 60_000);
  const conn = await rawConnection(svc.url);
  conn.socket.write(`GET /proxy/slow HTTP/1.1\r\nHost: ${new URL(svc.url).host}\r\nSVC-PROXY-KEY: ${PROXY_KEY}\r\n\r\n`);
  await arrived;
  const exited = exitOf(svc);
  svc.child.kill('SIGTERM');
  await until(() => svc.output().includes('stopping: draining requests in flight'), 'the stopping log line');
  svc.child.kill('SIGINT');
  t.equal(await exited, 1, 'exit code 1, without waiting for the 60 s grace');
  t.match(svc.output(), /second signal while draining: exiting at once/);
  noSecretInOutput(t, svc);
});
