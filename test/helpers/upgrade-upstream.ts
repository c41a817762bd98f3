/** An upstream that accepts protocol upgrades at any path and echoes every byte back (tests only). */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';

export interface Seen {
  url: string;
  headers: IncomingHttpHeaders;
}

interface Tap {
  teardown(fn: () => unknown): void;
}

/** Plain requests get `plain`; an upgrade is recorded in `seen`, answered 101 and echoed. */
export async function startEchoUpstream(tap: Tap): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((_req, res) => res.end('plain'));
  server.on('upgrade', (req, socket: Duplex) => {
    seen.push({ url: req.url ?? '', headers: req.headers });
    socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
    socket.pipe(socket);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  tap.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}
