/**
 * The Node baseline of the proxy benchmark: the least a Node reverse proxy does. A node:http
 * server forwards each request's method, path, headers (minus hop-by-hop ones) and body, streamed,
 * to one upstream over an undici keep-alive Pool (`Pool.stream`), and streams the response back
 * with the upstream's status and headers (minus hop-by-hop ones). No authentication, no limits, no
 * logging, no transforms: what tokenproxy's pass-through should at least match.
 */
import { createServer, type IncomingHttpHeaders, type OutgoingHttpHeaders, type Server } from 'node:http';
import { Agent } from 'node:http';
import httpProxy from 'http-proxy';
import { Pool } from 'undici';
import { listenLocal } from './bare.js';

export interface Forwarder {
  url: string;
  server: Server;
  close(): Promise<void>;
}

/** RFC 9110 §7.6.1 connection-specific fields, plus the Host (the pool's origin sets it). */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host']);

function endToEnd(headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const named = String(headers.connection ?? '')
    .toLowerCase()
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined || HOP_BY_HOP.has(k) || named.includes(k)) continue;
    out[k] = v;
  }
  return out;
}

export async function startForwarder(target: string, opts: { connections?: number; timeoutMs?: number } = {}): Promise<Forwarder> {
  const timeoutMs = opts.timeoutMs ?? 25_000;
  const pool = new Pool(target, {
    connections: opts.connections ?? 64,
    pipelining: 1,
    keepAliveTimeout: 60_000,
    connectTimeout: timeoutMs,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    const hasBody = req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined;
    pool.stream(
      {
        path: req.url ?? '/',
        method: (req.method ?? 'GET') as 'GET',
        headers: endToEnd(req.headers),
        body: hasBody ? req : undefined,
      },
      ({ statusCode, headers }) => {
        res.writeHead(statusCode, endToEnd(headers) as OutgoingHttpHeaders);
        return res;
      },
      (err) => {
        if (!err) return;
        if (!res.headersSent) {
          res.writeHead(502, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: err.message }));
        } else res.destroy(err);
      },
    );
  });
  return listenLocal(server, () => pool.close().catch(() => pool.destroy()));
}

/**
 * The same bare forwarder with http-proxy (1.18.1) doing the forwarding, over a keep-alive agent
 * (without one it opens a connection per request): the other candidate for
 * pass-through. Measured beside the undici forwarder so the choice rests on this run's figures.
 */
export async function startHttpProxyForwarder(target: string, opts: { connections?: number; timeoutMs?: number } = {}): Promise<Forwarder> {
  const agent = new Agent({ keepAlive: true, maxSockets: opts.connections ?? 64, keepAliveMsecs: 60_000 });
  const proxy = httpProxy.createProxyServer({ target, agent, xfwd: false, proxyTimeout: opts.timeoutMs ?? 25_000 });
  proxy.on('error', (err, _req, res) => {
    const r = res as import('node:http').ServerResponse;
    if ('headersSent' in r && !r.headersSent) {
      r.writeHead(502, { 'content-type': 'application/json' });
      r.end(JSON.stringify({ error: err.message }));
    } else (res as { destroy(): void }).destroy();
  });
  const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => proxy.web(req, res));
  return listenLocal(server, () => {
    proxy.close();
    agent.destroy();
  });
}
