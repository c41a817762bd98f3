/**
 * The only place responses become bytes: JSON bodies, empty bodies, and problem bodies
 * (RFC 9457, application/problem+json) for every error.
 */
import type { ServerResponse } from 'node:http';
import { ServiceError, toProblem } from '../errors.js';

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const bytes = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { ...headers, 'content-type': 'application/json; charset=utf-8', 'content-length': bytes.length });
  res.end(bytes);
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
