/**
 * The baseline server: bare node:http answering every request with one constant body (after
 * reading the request body, as any real handler must). Benchmarks compare a route against it.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface BareServer {
  url: string;
  server: Server;
  close(): Promise<void>;
}

export async function startBareServer(body: Buffer, contentType = 'application/json'): Promise<BareServer> {
  const headers = { 'content-type': contentType, 'content-length': String(body.length) };
  const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, headers);
      res.end(body);
    });
  });
  return listenLocal(server);
}

/**
 * Listens on 127.0.0.1, port 0; `close` stops the server, drops its keep-alive connections, then
 * runs `after` (e.g. closing a forwarder's pool).
 */
export async function listenLocal(server: Server, after?: () => unknown): Promise<BareServer> {
  await new Promise<void>((res, rej) => {
    server.once('error', rej);
    server.listen(0, '127.0.0.1', () => res());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    close: async () => {
      await new Promise<void>((res) => {
        server.close(() => res());
        server.closeAllConnections();
      });
      await after?.();
    },
  };
}
