// The proxy benchmark's Node reference servers, each run as a process of its own so its CPU per
// request is read from /proc like tokenproxy's (which runs from dist/ in its own process too):
//
//   node bench/lib/reference-server.mjs forwarder <upstream origin>
//       the bare forwarder: node:http + an undici keep-alive Pool, Pool.stream (lib/forwarder.ts
//       documents it; this is the same code without a loader)
//   node bench/lib/reference-server.mjs constant
//       bare node:http answering every request with the upstream's constant body after reading the
//       request body: the ceiling of a Node process that answers by itself (the /tokenize ceiling)
//
// Plain JavaScript on purpose: under tsx every function gets a `__name` wrapper, which would make
// the references slower than they are while tokenproxy runs compiled.
// Prints `{"port": N}` on its first line of stdout once it listens; SIGTERM ends it.
import { createServer } from 'node:http';
import { Pool } from 'undici';

/** RFC 9110 §7.6.1 connection-specific fields, plus the Host (the pool's origin sets it). */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host']);

/** The headers minus hop-by-hop ones and those the Connection header names. */
export function endToEnd(headers) {
  const named = String(headers.connection ?? '')
    .toLowerCase()
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const out = {};
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined || HOP_BY_HOP.has(k) || named.includes(k)) continue;
    out[k] = v;
  }
  return out;
}

/** The forwarder's request handler over `pool`. */
export function forwardTo(pool) {
  return (req, res) => {
    const hasBody = req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined;
    pool.stream(
      { path: req.url ?? '/', method: req.method ?? 'GET', headers: endToEnd(req.headers), body: hasBody ? req : undefined },
      ({ statusCode, headers }) => {
        res.writeHead(statusCode, endToEnd(headers));
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
  };
}

export function forwarderPool(target, opts = {}) {
  const timeoutMs = opts.timeoutMs ?? 25_000;
  return new Pool(target, {
    connections: opts.connections ?? 64,
    pipelining: 1,
    keepAliveTimeout: 60_000,
    connectTimeout: timeoutMs,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
}

function constantHandler(body) {
  const headers = { 'content-type': 'application/json', 'content-length': String(body.length) };
  return (req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, headers);
      res.end(body);
    });
  };
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  const [kind, arg] = process.argv.slice(2);
  const handler = kind === 'forwarder' ? forwardTo(forwarderPool(arg)) : kind === 'constant' ? constantHandler(Buffer.from(arg ?? '{}')) : null;
  if (!handler) {
    console.error('usage: reference-server.mjs forwarder <origin> | constant [body]');
    process.exit(2);
  }
  const server = createServer({ keepAliveTimeout: 65_000 }, handler);
  server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port })));
  process.once('SIGTERM', () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
}
