/**
 * A real upstream for proxy tests: node:http on 127.0.0.1 port 0 that records every request it
 * receives (method, raw target, headers, body) and answers with what the test chose. Also a raw
 * HTTP client (node:http, no URL normalisation) for requests fetch would rewrite, such as `..`.
 */
import { createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  method: string;
  /** The request target exactly as it arrived (path and query). */
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export type Responder = (req: Received, res: ServerResponse) => void | Promise<void>;

export interface Upstream {
  url: string;
  port: number;
  received: Received[];
  /** Replaces how the upstream answers (default: 200 JSON echo of method, url and body length). */
  respond(fn: Responder): void;
  close(): Promise<void>;
}

interface Tap {
  teardown(fn: () => unknown): void;
}

export const defaultResponder: Responder = (r, res) => {
  const body = JSON.stringify({ ok: true, method: r.method, url: r.url, length: r.body.length });
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
};

/**
 * Starts a recording upstream; `record: false` counts bytes without keeping bodies (large bodies).
 * `onData` is told the size of every body chunk as it arrives (how far a streamed body has got).
 */
export async function startUpstream(t: Tap, opts: { record?: boolean; onData?: (bytes: number) => void } = {}): Promise<Upstream> {
  const received: Received[] = [];
  let responder: Responder = defaultResponder;
  const server = createServer({ keepAliveTimeout: 10_000 }, (req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      opts.onData?.(c.length);
      if (opts.record !== false) chunks.push(c);
    });
    req.on('end', () => {
      const r: Received = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: opts.record === false ? Buffer.alloc(0) : Buffer.concat(chunks),
      };
      if (opts.record === false) Object.defineProperty(r, 'size', { value: size, enumerable: true });
      received.push(r);
      void Promise.resolve(responder(r, res)).catch(() => res.destroy());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  t.teardown(close);
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, port, received, respond: (fn) => (responder = fn), close };
}

export interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  text: string;
  json: any;
}

/** One request with node:http: the path is sent exactly as given. */
export function rawRequest(base: string, opts: { method?: string; path: string; headers?: Record<string, string>; body?: string | Buffer }): Promise<RawResponse> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: u.hostname, port: u.port, method: opts.method ?? 'GET', path: opts.path, headers: opts.headers, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const body = Buffer.concat(chunks);
          const text = body.toString('utf8');
          let json: unknown;
          try {
            json = text ? JSON.parse(text) : undefined;
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body, text, json });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}
