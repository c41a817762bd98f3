/**
 * Where a proxied request goes (docs/proxy.md): `destination_url` (trailing `/` trimmed) + suffix +
 * `?query`. The destination's origin is fixed at start-up and the request is sent to that origin
 * with only a path, so no suffix can change the host. The suffix is also kept below the base
 * path: dot segments (raw or percent-encoded, however often, with or without `;` path parameters,
 * which Tomcat and Spring strip before resolving `..`), encoded slashes and backslashes are refused,
 * and repeated slashes collapse (so `//evil.example` is a path, never an authority).
 */
import { ServiceError } from '../errors.js';

export interface DestinationBase {
  /** `http://host:port`, as undici's Pool wants it. */
  origin: string;
  /** The base path without a trailing `/` ('' for the root). */
  basePath: string;
  /** The query of destination_url, without `?` ('' when none). */
  baseQuery: string;
  /**
   * `Basic …` from credentials in destination_url (`https://user:pass@host/`), sent on every
   * forwarded request in place of the caller's Authorization; added after the request transforms,
   * so user code never sees it.
   */
  authorization: string | undefined;
}

export function parseDestination(destinationUrl: string): DestinationBase {
  const u = new URL(destinationUrl);
  const authorization =
    u.username === '' && u.password === ''
      ? undefined
      : `Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`, 'utf8').toString('base64')}`;
  return { origin: u.origin, basePath: u.pathname.replace(/\/+$/, ''), baseQuery: u.search.slice(1), authorization };
}

/** The query parameter that may carry the proxy key; it never reaches the destination. */
export const PROXY_KEY_PARAM = 'svc-proxy-key';

const MAX_DECODE_ROUNDS = 4;

function refuse(detail: string): ServiceError {
  return new ServiceError('invalid_proxy_path', { detail });
}

/** Non-empty segments of unreserved and sub-delim characters (no `%`, `;`, `\\`), with an optional final `/`. */
const SIMPLE_SUFFIX = /^(?:\/[A-Za-z0-9\-_~!$&'()*+,=:@.]+)+\/?$/;
const DOT_SEGMENT = /\/\.\.?(?:\/|$)/;

/** Decodes a path segment until it stops changing; throws on a malformed escape. */
function fullyDecoded(segment: string): string {
  let current = segment;
  for (let i = 0; i < MAX_DECODE_ROUNDS; i++) {
    let next: string;
    try {
      next = decodeURIComponent(current);
    } catch {
      throw refuse('The path has a malformed percent-escape');
    }
    if (next === current) return current;
    current = next;
  }
  throw refuse('The path is encoded too many times');
}

/**
 * Checks the raw suffix (what follows `/proxy`, starting with `/` or empty) and returns it with
 * repeated slashes collapsed. Throws invalid_proxy_path for anything that could leave the base.
 */
export function safeSuffix(rawSuffix: string): string {
  if (rawSuffix === '') return '';
  // Most suffixes are plain (`/v1/charges`): no escape, `;`, backslash, control character, empty
  // or dot segment; nothing below would refuse or change them.
  if (SIMPLE_SUFFIX.test(rawSuffix) && !(rawSuffix.includes('.') && DOT_SEGMENT.test(rawSuffix))) return rawSuffix;
  if (rawSuffix.includes('\\')) throw refuse('Backslashes are not allowed in the proxy path');
  const segments = rawSuffix.split('/');
  for (const seg of segments) {
    if (seg === '') continue;
    const decoded = seg.includes('%') ? fullyDecoded(seg) : seg;
    // `..;jsessionid=x` is `..` to a server that strips path parameters (RFC 3986 §3.3 allows
    // them in any segment; Tomcat and Spring drop everything from the first `;`).
    const name = decoded.includes(';') ? decoded.slice(0, decoded.indexOf(';')) : decoded;
    if (name === '.' || name === '..') throw refuse('Dot segments (. and .., also with ;-parameters) are not allowed in the proxy path');
    if (decoded.includes('/') || decoded.includes('\\')) throw refuse('Encoded slashes and backslashes are not allowed in the proxy path');
    if (/[\0-\x1f\x7f]/.test(decoded)) throw refuse('Control characters are not allowed in the proxy path');
  }
  return rawSuffix.replace(/\/{2,}/g, '/');
}

/** Removes every `svc-proxy-key` parameter (any case) from a raw query, leaving the rest as sent. */
export function stripProxyKeyParam(rawQuery: string): string {
  if (rawQuery === '') return '';
  return rawQuery
    .split('&')
    .filter((part) => {
      const name = part.split('=', 1)[0]!;
      let decoded = name;
      try {
        decoded = decodeURIComponent(name.replace(/\+/g, ' '));
      } catch {
        // A malformed name is not the key parameter; it is forwarded as sent.
      }
      return decoded.toLowerCase() !== PROXY_KEY_PARAM;
    })
    .join('&');
}

/** `scheme://authority` at the start of an absolute-form request target (RFC 9112 §3.2.2). */
const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/;

/**
 * Splits a raw request target (`/proxy/a/b?x=1`) into the raw suffix after `/proxy` and query.
 * The router matched `/proxy/*` on the normalised path; this takes the raw form of the same
 * request, which must itself start with `/proxy/` (or be `/proxy`): an absolute-form target
 * (`http://host/proxy/x`) is reduced to its path first, and anything else is refused rather than
 * appended to the base path as it is.
 */
export function splitProxyTarget(rawUrl: string): { suffix: string; query: string } {
  // Origin-form (`/proxy/…`), what nearly every request sends, cannot match ABSOLUTE_FORM.
  let target = rawUrl.charCodeAt(0) === 0x2f ? rawUrl : rawUrl.replace(ABSOLUTE_FORM, '');
  // A fragment is never part of a request; the router did not see it either.
  const hash = target.indexOf('#');
  if (hash !== -1) target = target.slice(0, hash);
  const q = target.indexOf('?');
  const path = q === -1 ? target : target.slice(0, q);
  const query = q === -1 ? '' : target.slice(q + 1);
  if (path !== '/proxy' && !path.startsWith('/proxy/')) throw refuse('The request target must start with /proxy/');
  return { suffix: path.slice('/proxy'.length), query };
}

/** The path and query to send to the destination's origin, from splitProxyTarget's parts. */
export function destinationPath(base: DestinationBase, { suffix, query }: { suffix: string; query: string }): string {
  const path = (base.basePath + safeSuffix(suffix)).replace(/\/{2,}/g, '/') || '/';
  const stripped = stripProxyKeyParam(query);
  const q = base.baseQuery === '' ? stripped : stripped === '' ? base.baseQuery : `${base.baseQuery}&${stripped}`;
  return q === '' ? path : `${path}?${q}`;
}
