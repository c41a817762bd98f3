/**
 * The Node baseline of the proxy benchmarks: the least a Node reverse proxy does. A node:http
 * server forwards each request's method, path, headers (minus hop-by-hop ones) and body, streamed,
 * to one upstream over an undici keep-alive Pool (`Pool.stream`), and streams the response back
 * with the upstream's status and headers (minus hop-by-hop ones). No authentication, no limits, no
 * logging, no transforms: what tokenproxy's pass-through should at least match.
 *
 * The code is in reference-server.mjs (plain JavaScript: bench/proxy.ts runs it as a process of
 * its own, without tsx's wrappers); this starts it inside the calling process.
 */
import { createServer, type Server } from 'node:http';
import { listenLocal } from './bare.js';
import { forwarderPool, forwardTo } from './reference-server.mjs';

export interface Forwarder {
  url: string;
  server: Server;
  close(): Promise<void>;
}

export async function startForwarder(target: string, opts: { connections?: number; timeoutMs?: number } = {}): Promise<Forwarder> {
  const pool = forwarderPool(target, opts);
  const server = createServer({ keepAliveTimeout: 65_000 }, forwardTo(pool));
  return listenLocal(server, () => pool.close().catch(() => pool.destroy()));
}
