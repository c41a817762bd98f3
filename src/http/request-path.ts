/**
 * The path a request is routed by: the request target as sent, never a URL parser's reading of it.
 *
 * A WHATWG URL parser removes dot segments, `%2e` forms included (`/proxy/%2e%2e/metrics` is
 * `/metrics` to it), takes a backslash for a slash, and reads `//host/…` as an authority. Routing
 * on its pathname let a path that a front proxy forwards as under `/proxy/` or `/elements/` reach
 * another route. Here the path is cut from the raw target; a dot segment in it is refused
 * (pipeline.ts: 400 on every route) rather than resolved, since no route of this service has one.
 */
import { ServiceError } from '../errors.js';

/** `scheme://authority` at the start of an absolute-form request target (RFC 9112 §3.2.2). */
const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/;

const PLAIN_DOT_SEGMENT = /[/\\]\.\.?(?:[/\\]|$)/;

/** How many times a segment is percent-decoded in search of a dot segment. */
const MAX_DECODE_ROUNDS = 4;

/**
 * The path of a request target, as sent (without query and fragment): origin-form as it is, an
 * absolute-form target reduced to its path. Any other form (`*`) is no route's.
 */
export function routedPath(target: string): string {
  let path = target;
  if (path.charCodeAt(0) !== 0x2f) {
    const authority = ABSOLUTE_FORM.exec(path);
    if (!authority) throw new ServiceError('route_not_found');
    path = path.slice(authority[0].length);
    if (path.charCodeAt(0) !== 0x2f) path = '/' + path;
  }
  const end = endOfPath(path);
  return end === path.length ? path : path.slice(0, end);
}

function endOfPath(path: string): number {
  const q = path.indexOf('?');
  const h = path.indexOf('#');
  if (q === -1) return h === -1 ? path.length : h;
  return h === -1 || q < h ? q : h;
}

/**
 * Whether a segment of `path` is `.` or `..`, as written or once percent-decoded (or more: `%252e`),
 * in any case (`%2E`, `.%2e`, `%2e.`). Backslashes count as separators, as they do to a WHATWG
 * parser (and so to a front proxy built on one), and so does a decoded `/`.
 */
export function hasDotSegment(path: string): boolean {
  // Without an escape, only a plain `.` or `..` between separators can be one (the usual case).
  if (!path.includes('%')) return path.includes('.') && PLAIN_DOT_SEGMENT.test(path);
  for (const segment of path.split(/[/\\]/)) {
    if (isDotSegment(segment)) return true;
  }
  return false;
}

function isDotSegment(segment: string): boolean {
  let current = segment;
  for (let round = 0; ; round++) {
    if (current === '.' || current === '..') return true;
    if (round === MAX_DECODE_ROUNDS || !current.includes('%')) break;
    let next: string;
    try {
      next = decodeURIComponent(current);
    } catch {
      // A malformed escape is no dot segment; the route decides what it makes of it.
      break;
    }
    if (next === current) break;
    if (/[/\\]/.test(next)) return next.split(/[/\\]/).some(isDotSegment);
    current = next;
  }
  return false;
}
