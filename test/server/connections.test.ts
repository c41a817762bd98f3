/**
 * Connections that never send a request are closed (issue 10, finding 11: 10,000 silent sockets
 * were held for 70 s and more). `server.request_header_timeout_ms` bounds the time to the first
 * request's headers; a connection that did send a request keeps the keep-alive idle timeout.
 */
import { connect, type Socket } from 'node:net';
import t, { type Test } from 'tap';
import { baseConfig, startTestService } from '../helpers/service.js';

const TIMEOUT = 300;

async function service(t: Test) {
  const cfg = baseConfig();
  cfg.server = { ...(cfg.server as object), request_header_timeout_ms: TIMEOUT };
  return startTestService(t, { config: cfg });
}

function open(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) }, () => resolve(socket));
    socket.on('error', reject);
  });
}

/** Resolves with the milliseconds until the server closed the socket (or the cap, then -1). */
function closedWithin(socket: Socket, capMs: number): Promise<number> {
  const start = performance.now();
  return new Promise((resolve) => {
    const cap = setTimeout(() => resolve(-1), capMs);
    socket.on('error', () => undefined);
    socket.once('close', () => {
      clearTimeout(cap);
      resolve(performance.now() - start);
    });
    socket.resume();
  });
}

t.test('a connection that sends nothing is closed by the server after request_header_timeout_ms', async (t) => {
  const s = await service(t);
  const sockets = await Promise.all(Array.from({ length: 20 }, () => open(s.url)));
  const closed = await Promise.all(sockets.map((so) => closedWithin(so, 15_000)));
  t.ok(closed.every((ms) => ms >= 0), `every silent socket was closed (${closed.map(Math.round).join(', ')} ms)`);
  t.ok(closed.every((ms) => ms >= TIMEOUT * 0.8), 'none before the timeout');
});

t.test('a connection that sends half a request line and stops is closed too', async (t) => {
  const s = await service(t);
  const so = await open(s.url);
  so.write('GET /healthz HTTP/1.1\r\nHost: x\r\n');
  t.ok((await closedWithin(so, 15_000)) >= 0, 'closed');
});

t.test('a connection that sent a request in time is served and kept alive past the header timeout', async (t) => {
  const s = await service(t);
  const so = await open(s.url);
  let received = '';
  so.setEncoding('latin1');
  so.on('data', (d: string) => (received += d));
  const answers = (n: number) => new Promise<void>((resolve) => {
    const check = () => ((received.match(/HTTP\/1\.1 200/g) ?? []).length >= n ? resolve() : so.once('data', check));
    check();
  });
  so.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  await answers(1);
  // Idle for three header timeouts: the keep-alive timeout (65 s) governs now, not the header one.
  await new Promise((r) => setTimeout(r, TIMEOUT * 3));
  t.notOk(so.destroyed, 'still open');
  so.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  await answers(2);
  t.pass('the second request on the same connection was answered');
  so.destroy();
});

t.test('the header timeout may not exceed the request timeout', async (t) => {
  const cfg = baseConfig();
  cfg.server = { ...(cfg.server as object), request_header_timeout_ms: 70_000, request_timeout_ms: 60_000 };
  await t.rejects(startTestService(t, { config: cfg }), /request_header_timeout_ms/);
});
