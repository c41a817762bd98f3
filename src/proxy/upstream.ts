/**
 * Forwarding to a destination with undici: one keep-alive Pool per proxy, with connect, headers
 * and body timeouts from the proxy's `timeout_ms`. Failures of the connection or the destination
 * are mapped here, once (DESIGN §5): unreachable → 502, timed out → 504. Nothing of an undici
 * error message (which may name hosts or quote data) reaches a response.
 */
import type { Readable, Writable } from 'node:stream';
import { Pool, type Dispatcher } from 'undici';
import { ServiceError } from '../errors.js';

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);
/** Connecting never waits longer than this, even under a long proxy timeout. */
const MAX_CONNECT_TIMEOUT_MS = 10_000;

export interface ForwardRequest {
  method: string;
  /** Path and query on the destination's origin. */
  path: string;
  headers: Record<string, string | string[]>;
  body: Buffer | Readable | undefined;
}

export interface UpstreamHead {
  statusCode: number;
  headers: Record<string, string | string[] | undefined>;
}

/** Maps an error of the forwarding to the catalogue; ServiceErrors (e.g. 413) pass as they are. */
export function upstreamError(err: unknown): ServiceError {
  if (err instanceof ServiceError) return err;
  const code = (err as { code?: string } | null)?.code;
  if (code !== undefined && TIMEOUT_CODES.has(code)) {
    return new ServiceError('destination_timeout', { detail: 'The destination did not answer within the proxy timeout', cause: err });
  }
  return new ServiceError('destination_unreachable', { detail: 'The destination could not be reached or closed the connection', cause: err });
}

export class Upstream {
  private readonly pool: Pool;

  constructor(origin: string, timeoutMs: number) {
    this.pool = new Pool(origin, {
      connect: { timeout: Math.min(timeoutMs, MAX_CONNECT_TIMEOUT_MS) },
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      keepAliveTimeout: 4_000,
    });
  }

  /**
   * Sends the request and hands the response head to `sink`, which returns where the body goes
   * (the client's response when streaming, a collector when a transform needs the whole body).
   */
  async stream(req: ForwardRequest, sink: (head: UpstreamHead) => Writable): Promise<void> {
    await this.pool.stream(
      { method: req.method as Dispatcher.HttpMethod, path: req.path, headers: req.headers, body: req.body },
      ({ statusCode, headers }) => sink({ statusCode, headers: headers as UpstreamHead['headers'] }),
    );
  }

  close(): Promise<void> {
    return this.pool.close();
  }

  destroy(): Promise<void> {
    return this.pool.destroy();
  }
}
