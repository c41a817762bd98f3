/**
 * Forwarding to a destination with undici: one keep-alive Pool per proxy, with connect, headers
 * and body timeouts from the proxy's `timeout_ms`. Failures of the connection or the destination
 * are mapped here, once (one mapping per dependency, at its edge): unreachable → 502, timed out → 504. Nothing of an undici
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
   * Resolves when that Writable has finished; rejects when the destination, the request body or
   * the Writable failed (the other side is then aborted).
   */
  stream(req: ForwardRequest, sink: (head: UpstreamHead) => Writable): Promise<void> {
    return streamVia(this.pool, req, sink);
  }

  close(): Promise<void> {
    return this.pool.close();
  }

  destroy(): Promise<void> {
    return this.pool.destroy();
  }
}

/** Upstream.stream over any undici dispatcher (the outbound proxy's pinned pools, egress.ts). */
export function streamVia(dispatcher: Dispatcher, req: ForwardRequest, sink: (head: UpstreamHead) => Writable): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const handler = new ForwardHandler(sink, resolve, reject);
    try {
      dispatcher.dispatch({ method: req.method as Dispatcher.HttpMethod, path: req.path, headers: req.headers, body: req.body }, handler);
    } catch (err) {
      handler.fail(err);
    }
  });
}

const noop = (): void => {};

const HANDLER = Symbol('tokenproxy.forward');
type HandledSink = Writable & { [HANDLER]?: ForwardHandler };

function onSinkClose(this: HandledSink): void {
  this[HANDLER]?.sinkClosed(this);
}

const CLOSED_EARLY = Object.assign(new Error('the response closed before it finished'), { code: 'ERR_STREAM_PREMATURE_CLOSE' });

/**
 * undici's dispatch handler for one forwarded request: the response body goes straight into the
 * Writable the caller picks, with backpressure (pause when it is full, resume on 'drain'). What
 * `Pool.stream` does, without its per-request async resource and end-of-stream listeners.
 */
class ForwardHandler implements Dispatcher.DispatchHandler {
  private sink: Writable | null = null;
  private controller: Dispatcher.DispatchController | null = null;
  /** A 'drain' listener is waiting to resume the destination's body. */
  private waiting = false;
  private settled = false;

  constructor(
    private readonly pick: (head: UpstreamHead) => Writable,
    private readonly resolve: () => void,
    private readonly reject: (err: unknown) => void,
  ) {}

  /** Present so undici takes this for a handler of its current API (see UnwrapHandler.unwrap). */
  onRequestStart(): void {}

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    if (statusCode < 200) return; // 1xx: the final response follows
    let sink: Writable;
    try {
      sink = this.pick({ statusCode, headers });
    } catch (err) {
      controller.abort(err as Error);
      return;
    }
    this.sink = sink;
    this.controller = controller;
    // Two listeners a request ('drain' only once a write had to wait): a Writable that finished,
    // failed or was destroyed emits 'close' after it ('finish' comes first; an error is stored as
    // `errored`), so 'close' alone tells how it ended. Both are shared functions: the handler
    // rides on the sink, so no closure is made a request.
    (sink as HandledSink)[HANDLER] = this;
    sink.on('error', noop);
    sink.on('close', onSinkClose);
  }

  /** The sink closed: finished (done), or the caller went away, the sink failed or was destroyed (stop reading from the destination). */
  sinkClosed(sink: Writable): void {
    if (sink.writableFinished) {
      this.done();
      return;
    }
    const err = sink.errored ?? CLOSED_EARLY;
    this.controller?.abort(err);
    this.fail(err);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    const sink = this.sink;
    if (!sink || sink.write(chunk)) return;
    controller.pause();
    if (!this.waiting) {
      this.waiting = true;
      sink.once('drain', () => {
        this.waiting = false;
        controller.resume();
      });
    }
  }

  onResponseEnd(): void {
    if (this.sink) this.sink.end();
    else this.done();
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    if (this.sink && !this.sink.destroyed && !this.sink.writableFinished) this.sink.destroy(err);
    this.fail(err);
  }

  fail(err: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.reject(err);
  }

  private done(): void {
    if (this.settled) return;
    this.settled = true;
    this.resolve();
  }
}
