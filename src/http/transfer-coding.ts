/**
 * The request's transfer coding, checked on every route before anything reads the body. Only
 * `chunked` is applied; any other coding is refused with 501 (RFC 9112 §6.1: a server that
 * receives a transfer coding it does not understand answers 501). Node's parser takes
 * `gzip, chunked` as chunked and hands on the still-compressed bytes: a JSON route would read
 * them as they are (and the gzip coding be silently ignored), a proxy forward or scan them without
 * a header saying they are compressed.
 */
import { ServiceError } from '../errors.js';

/** `te`: the request's Transfer-Encoding header. */
export function refuseTransferCoding(te: string | string[] | undefined): void {
  if (te === undefined) return;
  const codings = (Array.isArray(te) ? te.join(',') : te).split(',').map((c) => c.trim().toLowerCase()).filter(Boolean);
  if (codings.length === 1 && codings[0] === 'chunked') return;
  throw new ServiceError('unsupported_transfer_encoding', {
    detail: 'Request bodies are accepted with Transfer-Encoding: chunked only (a compressed body is sent with Content-Encoding where a route takes one)',
  });
}
