/**
 * What the inbound (inbound.ts) and the outbound proxy (outbound.ts) share once the destination
 * is chosen: the checks on the caller's framing, the answer's headers, and what a
 * forwarding failure becomes before and after the answer started.
 */
import type { OutgoingHttpHeaders } from 'node:http';
import type { Context } from '../http/context.js';
import { upstreamError, type UpstreamHead } from './upstream.js';

export const DESTINATION_STATUS_HEADER = 'svc-proxy-destination-status';

/**
 * Refuses a request whose Transfer-Encoding is anything but `chunked` (501). The pipeline runs the
 * same check on every route before its stages (src/http/transfer-coding.ts); the proxies repeat
 * it where they read the body, which costs a header lookup.
 */
export { refuseTransferCoding as checkTransferEncoding } from '../http/transfer-coding.js';

export function isIdentity(encoding: string | string[] | undefined): boolean {
  const v = Array.isArray(encoding) ? encoding.join(',') : encoding;
  return v === undefined || v.trim() === '' || v.trim().toLowerCase() === 'identity';
}

/** Adds ours (trace id, rate-limit headers, destination status) to `upstream`, a fresh object it changes. */
export function answerHeaders(ctx: Context, head: UpstreamHead, upstream: OutgoingHttpHeaders): OutgoingHttpHeaders {
  Object.assign(upstream, ctx.headers);
  upstream[DESTINATION_STATUS_HEADER] = String(head.statusCode);
  return upstream;
}

/**
 * Runs a forward whose answer may already stream to the caller. Resolves true when it completed;
 * a failure before the response started throws the mapped ServiceError; after it started, the
 * caller's connection is cut (a cut-off body must not pass as whole) and it resolves false.
 */
export async function forwardOrCut(ctx: Context, forward: () => Promise<void>, failed?: (err: unknown) => void): Promise<boolean> {
  try {
    await forward();
    return true;
  } catch (err) {
    failed?.(err);
    cutOrThrow(ctx, err);
    return false;
  }
}

/** A forwarding failure: the mapped ServiceError before the response started, else the caller's connection cut. */
export function cutOrThrow(ctx: Context, err: unknown): void {
  if (!ctx.res.headersSent) throw upstreamError(err);
  ctx.log.warn({ code: upstreamError(err).code }, 'destination failed after the response started');
  ctx.res.destroy();
}
