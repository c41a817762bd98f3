/**
 * Header hygiene for the inbound proxy (RFC 9110 §7.6.1): hop-by-hop headers and every `SVC-*`
 * header (keys, trace ids) stay here; `X-Forwarded-For/-Proto/-Host` are set by us; the length
 * and framing of the body are the forwarder's to set. Pure functions over plain header objects.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

/** RFC 9110 §7.6.1 hop-by-hop fields, plus the de-facto ones proxies also drop. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** Set by us or by the HTTP client; never copied from the caller. */
const REPLACED = new Set(['host', 'content-length', 'expect', 'forwarded', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host']);

const NONE: ReadonlySet<string> = new Set();
const KEEP_ALIVE: ReadonlySet<string> = new Set(['keep-alive']);
const CLOSE: ReadonlySet<string> = new Set(['close']);

function connectionListed(headers: IncomingHttpHeaders | Record<string, unknown>): ReadonlySet<string> {
  const c = headers.connection;
  if (c === undefined) return NONE;
  // `keep-alive` or `close`, what almost every peer sends (a Node destination on every answer):
  // the same sets as the parse below gives, without a Set and three arrays a request.
  if (c === 'keep-alive' || c === 'Keep-Alive') return KEEP_ALIVE;
  if (c === 'close' || c === 'Close') return CLOSE;
  const value = Array.isArray(c) ? c.join(',') : typeof c === 'string' ? c : '';
  return new Set(value.split(',').map((s) => s.trim().toLowerCase()).filter(Boolean));
}

export interface ForwardedFor {
  /** The socket peer of this request. */
  peer: string;
  /** True when the peer is a trusted proxy (server.trust_proxy): its X-Forwarded-* chain is kept. */
  peerTrusted: boolean;
  /** The Host the caller addressed. */
  host: string | undefined;
}

/**
 * The headers to send upstream: the caller's, cleaned, with X-Forwarded-* set. This and
 * responseHeaders run on every proxied request: they allocate nothing but the result (no entry
 * arrays, and no lower-cased copy of a name that is lower case already, as Node's and undici's
 * parsed names are).
 */
export function outgoingHeaders(incoming: IncomingHttpHeaders, fwd: ForwardedFor): Record<string, string | string[]> {
  const listed = connectionListed(incoming);
  const out: Record<string, string | string[]> = {};
  for (const name in incoming) {
    const value = incoming[name];
    if (value === undefined) continue;
    const n = isLower(name) ? name : name.toLowerCase();
    if (HOP_BY_HOP.has(n) || REPLACED.has(n) || listed.has(n) || n.startsWith('svc-')) continue;
    out[n] = value;
  }
  return forwardedHeaders(incoming, fwd, out);
}

/** X-Forwarded-For/-Proto/-Host for the destination (into `out`): a trusted peer's chain kept, else ours alone. */
export function forwardedHeaders<T extends Record<string, string | string[]>>(incoming: IncomingHttpHeaders, fwd: ForwardedFor, out: T = {} as T): T {
  const o = out as Record<string, string | string[]>;
  const prior = fwd.peerTrusted ? single(incoming['x-forwarded-for']) : undefined;
  o['x-forwarded-for'] = prior ? `${prior}, ${fwd.peer}` : fwd.peer;
  o['x-forwarded-proto'] = (fwd.peerTrusted ? single(incoming['x-forwarded-proto']) : undefined) ?? 'http';
  const host = (fwd.peerTrusted ? single(incoming['x-forwarded-host']) : undefined) ?? fwd.host;
  if (host !== undefined) o['x-forwarded-host'] = host;
  return out;
}

/** Headers a transform returned, cleaned the same way (a transform cannot set hop-by-hop or SVC-*). */
export function cleanTransformHeaders(headers: Record<string, string | string[]>): Record<string, string | string[]> {
  const listed = connectionListed(headers);
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    const n = name.toLowerCase();
    if (HOP_BY_HOP.has(n) || n === 'host' || n === 'content-length' || n === 'expect' || listed.has(n) || n.startsWith('svc-')) continue;
    out[n] = value;
  }
  return out;
}

/** The destination's response headers to pass to the caller: hop-by-hop and length dropped. */
export function responseHeaders(upstream: Record<string, string | string[] | undefined>, keepLength: boolean): OutgoingHttpHeaders {
  const listed = connectionListed(upstream);
  const out: OutgoingHttpHeaders = {};
  for (const name in upstream) {
    const value = upstream[name];
    if (value === undefined) continue;
    // undici gives lower-case names; the check keeps this safe for any other caller.
    const n = isLower(name) ? name : name.toLowerCase();
    if (HOP_BY_HOP.has(n) || listed.has(n)) continue;
    if (n === 'content-length' && !keepLength) continue;
    out[n] = value;
  }
  return out;
}

const UPPER = /[A-Z]/;
function isLower(name: string): boolean {
  return !UPPER.test(name);
}

function single(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(', ') : v;
}
