/**
 * A connection that never sends a request holds a file descriptor for free: 10,000 silent sockets
 * were kept for 70 s and more. A new connection must deliver its first request's headers within
 * `server.request_header_timeout_ms` (nginx's client_header_timeout) or it is closed. Later
 * requests on a keep-alive connection are covered by Node's own timers (keepAliveTimeout while
 * idle, headersTimeout once a request has begun).
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';

export function closeSilentConnections(server: Server, timeoutMs: number): void {
  const timers = new WeakMap<Socket, NodeJS.Timeout>();
  const clear = (socket: Socket) => {
    const timer = timers.get(socket);
    if (timer === undefined) return;
    clearTimeout(timer);
    timers.delete(socket);
  };
  server.on('connection', (socket: Socket) => {
    const timer = setTimeout(() => {
      timers.delete(socket);
      socket.destroy();
    }, timeoutMs);
    timer.unref();
    timers.set(socket, timer);
    socket.once('close', () => clear(socket));
  });
  // The headers of a request (or of an upgrade) arrived in time.
  server.on('request', (req) => clear(req.socket));
  server.on('upgrade', (req) => clear(req.socket));
}
