/**
 * The only place responses become bytes: JSON bodies, empty bodies, and problem bodies
 * (RFC 9457, application/problem+json) for every error.
 */
import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { ServiceError, toProblem } from '../errors.js';
import { DeferredJson } from './large-json.js';

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (body instanceof DeferredJson) {
    // Serialized in the JSON worker; a failure there is a 500 like any other.
    body.render().then(
      (bytes) => writeJson(res, status, bytes, headers),
      (err: unknown) => sendProblem(res, err instanceof ServiceError ? err : new ServiceError('internal_error', { cause: err }), headers),
    );
    return;
  }
  writeJson(res, status, Buffer.from(JSON.stringify(body)), headers);
}

/** A JSON body's bytes (a DeferredJson serialized in the JSON worker). */
export function jsonBytes(body: unknown): Buffer | Promise<Buffer> {
  return body instanceof DeferredJson ? body.render() : Buffer.from(JSON.stringify(body));
}

function writeJson(res: ServerResponse, status: number, bytes: Buffer, headers: Record<string, string>): void {
  if (res.destroyed) return;
  res.writeHead(status, { ...headers, 'content-type': 'application/json; charset=utf-8', 'content-length': bytes.length });
  res.end(bytes);
}

/** A text body in a given content type (the Prometheus exposition format of GET /metrics). */
export function sendText(res: ServerResponse, status: number, body: string, contentType: string, headers: Record<string, string> = {}): void {
  if (res.destroyed) return;
  res.writeHead(status, { ...headers, 'content-type': contentType, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

export function sendEmpty(res: ServerResponse, status: number, headers: Record<string, string> = {}): void {
  res.writeHead(status, headers);
  res.end();
}

/** Writes `err` as a problem body. `wrap` nests it as `{ [wrap]: problem }` (proxy errors). */
export function sendProblem(res: ServerResponse, err: unknown, headers: Record<string, string> = {}, wrap?: string): void {
  const problem = toProblem(err);
  const errHeaders = err instanceof ServiceError && err.headers ? err.headers : {};
  const body = wrap ? { [wrap]: problem } : problem;
  const bytes = Buffer.from(JSON.stringify(body));
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(problem.status, {
    ...headers,
    ...errHeaders,
    'content-type': wrap ? 'application/json; charset=utf-8' : 'application/problem+json',
    'content-length': bytes.length,
  });
  res.end(bytes);
}

/**
 * The same problem bytes on a raw connection (an upgrade request has no ServerResponse), then
 * the connection is closed. Returns the status written.
 */
export function sendSocketProblem(socket: Duplex, err: unknown, headers: Record<string, string> = {}, wrap?: string): number {
  const problem = toProblem(err);
  const errHeaders = err instanceof ServiceError && err.headers ? err.headers : {};
  const body = JSON.stringify(wrap ? { [wrap]: problem } : problem);
  const all = {
    ...headers,
    ...errHeaders,
    'content-type': wrap ? 'application/json; charset=utf-8' : 'application/problem+json',
    'content-length': String(Buffer.byteLength(body)),
    connection: 'close',
  };
  const lines = Object.entries(all).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  socket.end(`HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status] ?? ''}\r\n${lines}\r\n${body}`);
  return problem.status;
}
