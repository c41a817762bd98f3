/**
 * Bounded body reading: the limit is enforced while streaming, not only from Content-Length,
 * and a body over the limit is answered 413 without reading the rest into memory.
 */
import type { IncomingMessage } from 'node:http';
import { ServiceError } from '../errors.js';
import { invalidJsonDetail } from './json-error.js';
import { LARGE_JSON_BYTES, LargeJsonBody, parseElsewhere, ReactorArgsJson } from './large-json.js';
import { charsetRefusal, requireUtf8Json } from './utf8.js';

export async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) {
    throw new ServiceError('body_too_large', { detail: `The body limit is ${limit} bytes` });
  }
  // Listeners rather than `for await`: leaving an async iterator early destroys the request,
  // and with it the socket the 413 must be written to.
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        req.pause();
        reject(new ServiceError('body_too_large', { detail: `The body limit is ${limit} bytes` }));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
  });
}

/** The media type of a Content-Type header, lower case, without parameters. */
export function mediaType(req: IncomingMessage): string {
  const ct = req.headers['content-type'];
  return ct ? ct.split(';')[0]!.trim().toLowerCase() : '';
}

export function isJsonType(type: string): boolean {
  return type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'));
}

/**
 * The nesting depth of a JSON text, found by a scan that skips strings. Run before JSON.parse so
 * a hostile body (10,000 levels deep) is refused with a clear error, not parsed.
 */
export function jsonDepthExceeds(buf: Buffer, maxDepth: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < buf.length; i++) {
    const c = buf[i];
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped byte
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxDepth) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

/**
 * How a body over LARGE_JSON_BYTES is parsed, off the event loop either way: `walked`, in the JSON
 * worker, coming back as a LargeJsonBody (the tokenize routes, whose walk and answer accept it);
 * `small`, in the JSON worker, handed back when it holds at most MAX_SMALL_BODY_VALUES values
 * (routes whose bodies are small objects: search, PATCH); `args`, in the JSON worker, coming
 * back as the `args` member's JSON text (ReactorArgsJson, for POST /reactors/{id}/react); `here`,
 * on the event loop.
 */
export type LargeBodyMode = 'walked' | 'small' | 'args' | 'here';

/** The media types isJsonType accepts, as a 415 names them. */
export const JSON_MEDIA_TYPES: readonly string[] = ['application/json', 'application/*+json'];

/**
 * Reads and parses a JSON body; `accept` tells the media types allowed and `acceptedTypes` names
 * them for the 415. The two halves are the body stage's
 * (http/stages.ts), which hands the raw bytes to the idempotency stage in between.
 */
export async function readJson(
  req: IncomingMessage, limit: number, maxDepth: number, accept: (type: string) => boolean = isJsonType, large: LargeBodyMode = 'here',
  acceptedTypes: readonly string[] = JSON_MEDIA_TYPES,
): Promise<unknown> {
  return parseJson(await readJsonBytes(req, limit, accept, acceptedTypes), maxDepth, large);
}

/**
 * The body's bytes, once its media type is one `accept` takes (415 otherwise, naming
 * `acceptedTypes`) and its charset, if it names one, is UTF-8 (415 otherwise: utf8.ts).
 */
export function readJsonBytes(
  req: IncomingMessage, limit: number, accept: (type: string) => boolean = isJsonType, acceptedTypes: readonly string[] = JSON_MEDIA_TYPES,
): Promise<Buffer> {
  const type = mediaType(req);
  if (!accept(type)) {
    return Promise.reject(new ServiceError('unsupported_media_type', {
      detail: `Content-Type ${type || '(none)'} is not accepted here: send the body as ${acceptedTypes.join(' or ')}`,
    }));
  }
  const charset = charsetRefusal(req.headers['content-type'], 'JSON bodies');
  if (charset) return Promise.reject(charset);
  return readBody(req, limit);
}

/**
 * JSON bytes, checked to be UTF-8 before they are decoded (utf8.ts), parsed; `subject` names them
 * in a 400 ("The request body"). Shared by the small bodies' path below, the JSON worker's and the
 * proxy's; each scans the depth first.
 */
export function parseJsonBytes(buf: Buffer, subject: string): unknown {
  requireUtf8Json(buf, subject);
  const text = buf.toString('utf8');
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    // The parser's message can quote the body: only its offset is used (json-error.ts).
    throw new ServiceError('invalid_json', { detail: invalidJsonDetail(text, (err as Error).message, subject) });
  }
}

/** Parses JSON bytes: over LARGE_JSON_BYTES as `large` says, else here after the depth scan. */
export function parseJson(buf: Buffer, maxDepth: number, large: LargeBodyMode): unknown {
  if (buf.length > LARGE_JSON_BYTES && large === 'walked') return LargeJsonBody.parse(buf, maxDepth, Date.now());
  if (buf.length > LARGE_JSON_BYTES && large === 'small') return parseElsewhere(buf, maxDepth);
  if (buf.length > LARGE_JSON_BYTES && large === 'args') return ReactorArgsJson.parse(buf, maxDepth);
  // A body of at most maxDepth bytes cannot open more than maxDepth levels: small bodies skip the scan.
  if (buf.length > maxDepth && jsonDepthExceeds(buf, maxDepth)) {
    throw new ServiceError('nesting_too_deep', { detail: `The body may be nested at most ${maxDepth} levels deep` });
  }
  return parseJsonBytes(buf, 'The request body');
}
