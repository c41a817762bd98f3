/**
 * Egress control for the outbound proxy (docs/detokenization.md "Outbound proxy"): where a tenant may send
 * detokenized data, and the one connection that carries it.
 *
 * - `outbound.allowed_destinations` lists origins (`https://api.example.com`, `https://*.stripe.com`,
 *   `http://127.0.0.1:9090`); a `*` stands for exactly one DNS label, and a pattern needs a fixed
 *   registrable domain after its last `*` (`*`, `*.*`, `*.com`, `*.co.uk` are refused at load).
 *   An empty list (the default) refuses every destination.
 * - The destination's host is resolved ONCE per request; if any address it resolves to is
 *   loopback, link-local, private, CGNAT, unspecified, multicast, reserved or a cloud metadata
 *   address (also hidden in IPv4-mapped, NAT64 or 6to4 IPv6 forms), the request is refused,
 *   unless the matching entry names that host or address exactly (no wildcard).
 * - The connection goes to exactly the address that was checked (the TLS server name and Host
 *   stay the destination's name), so a second DNS answer cannot redirect it (DNS rebinding).
 * - undici's dispatcher follows no redirects: a 3xx reaches the caller as it is.
 */
import { readFileSync } from 'node:fs';
import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';
import { rootCertificates } from 'node:tls';
import type { Pool } from 'undici';
import { ServiceError } from '../errors.js';
import { compiledOr, type Compiled, type Problem } from '../problems.js';

/** An entry of `outbound.allowed_destinations` as written in the config. */
export type AllowedDestinationConfig = string | { origin: string; tls?: { ca_file: string } | undefined };

export interface AllowedEntry {
  scheme: 'http:' | 'https:';
  /** Lower-case labels; `*` matches one label. An IP literal is one "label" (v6 without brackets). */
  labels: string[];
  wildcard: boolean;
  port: number;
  /** The CA file's PEM, added to the system store for this destination. */
  ca: string | undefined;
  /** Index in the config list (pools are kept per entry). */
  index: number;
  /** The tenant's outbound.timeout_ms. */
  timeoutMs: number;
}

/** Where a request may go: the checked address and the dispatcher that connects only there. */
export interface EgressTarget {
  /** `scheme://host[:port]` of the destination as named (for audit and logs; never a value). */
  origin: string;
  address: string;
  dispatcher: Pool;
}

const DEFAULT_PORT: Record<string, number> = { 'http:': 80, 'https:': 443 };
const LABEL = /^(?:\*|[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)$/;
/** Pools kept at once (one per destination origin and address); the oldest idle one is closed. */
const MAX_POOLS = 64;
const MAX_CONNECT_TIMEOUT_MS = 10_000;

function entryOrigin(e: AllowedDestinationConfig): string {
  return typeof e === 'string' ? e : e.origin;
}

function hostOf(u: URL): string {
  return u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
}

/**
 * Parses one allow-list origin; returns a problem text instead when it is not
 * `scheme://host[:port]` with whole-label wildcards.
 */
function parseEntry(raw: string): Omit<AllowedEntry, 'ca' | 'index' | 'timeoutMs'> | string {
  // URL would turn `*` into `%2A`: take the wildcard labels out first.
  const m = /^(https?):\/\/([^/?#]+?)(?::(\d{1,5}))?\/?$/i.exec(raw.trim());
  if (!m) return 'must be an origin: http(s)://host[:port], with no path, query or credentials';
  const scheme = `${m[1]!.toLowerCase()}:` as 'http:' | 'https:';
  const hostText = m[2]!;
  if (hostText.includes('@')) return 'must not carry credentials';
  const port = m[3] === undefined ? DEFAULT_PORT[scheme]! : Number(m[3]);
  if (port < 1 || port > 65535) return 'the port must be 1-65535';
  if (hostText.startsWith('[')) {
    if (!hostText.endsWith(']') || isIP(hostText.slice(1, -1)) !== 6) return 'not a valid IPv6 address';
    return { scheme, labels: [new URL(`http://${hostText}`).hostname.slice(1, -1)], wildcard: false, port };
  }
  if (isIP(hostText) === 4) return { scheme, labels: [hostText], wildcard: false, port };
  const labels = hostText.toLowerCase().replace(/\.$/, '').split('.');
  if (labels.some((l) => !LABEL.test(l))) return 'the host must be a DNS name whose labels are letters, digits, - or a whole-label * wildcard';
  const wildcard = labels.includes('*');
  if (wildcard) {
    const problem = wildcardProblem(labels.slice(labels.lastIndexOf('*') + 1));
    if (problem) return problem;
  }
  return { scheme, labels, wildcard, port };
}

/**
 * Second-level labels that ccTLDs register under (`co.uk`, `com.au`, `gov.br`, …): a pattern whose
 * fixed part is one of these under a two-letter TLD ranges over a public suffix.
 */
const CCTLD_SECOND_LEVELS = new Set(['ac', 'co', 'com', 'edu', 'go', 'gob', 'gov', 'ltd', 'me', 'mil', 'ne', 'net', 'or', 'org', 'plc', 'sch']);
/**
 * Public suffixes where anyone can get a name of their own (the Public Suffix List's private
 * section; this is a short list of the common ones, not the whole list): `*.herokuapp.com` would
 * allow every customer's app of that host, an attacker's included.
 */
const SHARED_SUFFIXES = new Set([
  'herokuapp.com', 'github.io', 'gitlab.io', 'netlify.app', 'vercel.app', 'pages.dev', 'workers.dev', 'ngrok.io', 'ngrok-free.app',
  'ngrok.app', 'appspot.com', 'web.app', 'firebaseapp.com', 'azurewebsites.net', 'cloudfront.net', 'blogspot.com', 'glitch.me',
  'onrender.com', 'fly.dev', 'repl.co', 'trycloudflare.com', 'amazonaws.com', 's3.amazonaws.com',
]);

/**
 * A wildcard pattern needs a fixed registrable part after its last `*`: `*` alone
 * (every single-label host), `*.*`, `*.com` (a wildcard over a single public-suffix label),
 * `*.co.uk` and `*.herokuapp.com` (public suffixes of more labels) are refused at config load.
 */
function wildcardProblem(fixed: readonly string[]): string | null {
  const text = fixed.join('.');
  if (fixed.length < 2) {
    return `a wildcard needs a fixed domain after it of at least two labels, a registrable domain (e.g. https://*.example.com): ${text === '' ? 'nothing' : `"${text}"`} after the last * would allow any host under a public suffix`;
  }
  const [second, tld] = fixed.slice(-2) as [string, string];
  if ((fixed.length === 2 && tld.length === 2 && CCTLD_SECOND_LEVELS.has(second)) || SHARED_SUFFIXES.has(text)) {
    return `a wildcard needs a fixed registrable domain after it: "${text}" is a public suffix, so the pattern would allow other owners' hosts; name the domain (e.g. https://*.example.${text})`;
  }
  return null;
}

/** A tenant's `outbound` section as the config gives it. */
export interface OutboundSection {
  allowed_destinations: readonly AllowedDestinationConfig[];
  timeout_ms: number;
}

/**
 * One tenant's `outbound` section compiled: every entry parsed and its CA file read
 * once, here, or the problems, each prefixed with its config path.
 */
export function compileOutbound(outbound: OutboundSection, at: string): Compiled<readonly AllowedEntry[]> {
  const problems: Problem[] = [];
  const entries: AllowedEntry[] = [];
  outbound.allowed_destinations.forEach((e, index) => {
    const here = `${at}.outbound.allowed_destinations[${index}]`;
    const parsed = parseEntry(entryOrigin(e));
    if (typeof parsed === 'string') problems.push(`${here}: ${parsed}`);
    let ca: string | undefined;
    if (typeof e !== 'string' && e.tls) {
      if (typeof parsed !== 'string' && parsed.scheme !== 'https:') problems.push(`${here}.tls: only an https destination takes a CA file`);
      try {
        ca = readFileSync(e.tls.ca_file, 'utf8');
        if (!ca.includes('-----BEGIN CERTIFICATE-----')) problems.push(`${here}.tls.ca_file: holds no PEM certificate`);
      } catch (err) {
        problems.push(`${here}.tls.ca_file: cannot read ${e.tls.ca_file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
      }
    }
    if (typeof parsed !== 'string') entries.push(Object.freeze({ ...parsed, ca, index, timeoutMs: outbound.timeout_ms }));
  });
  return compiledOr(problems, () => Object.freeze(entries));
}

// ---- addresses ---------------------------------------------------------------------------------

const REFUSED_V4 = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8], // "this network", unspecified
  ['10.0.0.0', 8], // RFC 1918
  ['100.64.0.0', 10], // CGNAT (also Alibaba's metadata 100.100.100.200)
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata 169.254.169.254
  ['172.16.0.0', 12], // RFC 1918
  ['192.0.0.0', 24], // IETF protocol assignments (Oracle metadata 192.0.0.192)
  ['192.168.0.0', 16], // RFC 1918
  ['198.18.0.0', 15], // benchmarking
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) {
  REFUSED_V4.addSubnet(net, prefix, 'ipv4');
}

const REFUSED_V6 = new BlockList();
for (const [net, prefix] of [
  ['::', 96], // unspecified, loopback, IPv4-compatible
  ['100::', 64], // discard-only
  ['64:ff9b:1::', 48], // local-use NAT64
  ['fc00::', 7], // ULA (AWS metadata fd00:ec2::254)
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated)
  ['ff00::', 8], // multicast
] as const) {
  REFUSED_V6.addSubnet(net, prefix, 'ipv6');
}

/** The eight 16-bit groups of an IPv6 address (with an optional dotted IPv4 tail). */
function hextets(address: string): number[] {
  let text = address.split('%')[0]!.toLowerCase();
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const b = dotted[1]!.split('.').map(Number);
    text = text.slice(0, -dotted[1]!.length) + `${((b[0]! << 8) | b[1]!).toString(16)}:${((b[2]! << 8) | b[3]!).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  const h = head ? head.split(':') : [];
  const t = tail === undefined ? [] : tail ? tail.split(':') : [];
  const fill = tail === undefined ? [] : new Array<string>(8 - h.length - t.length).fill('0');
  return [...h, ...fill, ...t].map((g) => parseInt(g, 16));
}

function v4From(hi: number, lo: number): string {
  return `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
}

/** The IPv4 address an IPv6 form carries (mapped ::ffff:a.b.c.d, NAT64 64:ff9b::/96, 6to4 2002::/16). */
function embeddedV4(g: number[]): string | undefined {
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) return v4From(g[6]!, g[7]!);
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0)) return v4From(g[6]!, g[7]!);
  if (g[0] === 0x2002) return v4From(g[1]!, g[2]!);
  return undefined;
}

/** True for an address no outbound request may reach unless the allow-list names it. */
export function isInternalAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return REFUSED_V4.check(address, 'ipv4');
  if (family !== 6) return true; // not an address at all: refuse
  if (REFUSED_V6.check(address.split('%')[0]!, 'ipv6')) return true;
  const v4 = embeddedV4(hextets(address));
  return v4 !== undefined && REFUSED_V4.check(v4, 'ipv4');
}

// ---- the policy --------------------------------------------------------------------------------

function notAllowed(): ServiceError {
  return new ServiceError('destination_not_allowed', {
    detail: "The destination is not in the tenant's outbound.allowed_destinations; nothing was sent",
  });
}

function refusedAddress(): ServiceError {
  return new ServiceError('destination_address_refused', {
    detail: 'The destination resolves to an internal address (loopback, private, link-local or metadata) that the allow-list does not name; nothing was sent',
  });
}

export interface EgressOptions {
  /** DNS lookup, all addresses (node:dns/promises lookup by default). */
  lookup?: (host: string) => Promise<string[]>;
}

/** `p`, or a rejection after `ms` (getaddrinfo has no timeout of its own here). */
function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error('lookup timed out'), { code: 'ETIMEOUT' })), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

const systemLookup = async (host: string): Promise<string[]> => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);

let undici: Promise<typeof import('undici')> | undefined;

export class EgressPolicy {
  private readonly pools = new Map<string, Pool>();
  private readonly lookup: (host: string) => Promise<string[]>;

  /**
   * `byTenant`: each tenant's compiled allow-list (compileOutbound; the model builds the policy,
   *). Pools are made on first use and closed by `close`.
   */
  constructor(readonly byTenant: ReadonlyMap<string, readonly AllowedEntry[]>, opts: EgressOptions = {}) {
    this.lookup = opts.lookup ?? systemLookup;
  }

  /** The first allow-list entry that matches `url`, or throws destination_not_allowed. */
  match(tenantId: string, url: URL): AllowedEntry {
    const port = url.port === '' ? DEFAULT_PORT[url.protocol] : Number(url.port);
    const host = hostOf(url).toLowerCase().replace(/\.$/, '');
    const ipHost = isIP(host) !== 0;
    const labels = ipHost ? [host] : host.split('.');
    for (const e of this.byTenant.get(tenantId) ?? []) {
      if (e.scheme !== url.protocol || e.port !== port || e.labels.length !== labels.length) continue;
      if (ipHost ? !e.wildcard && e.labels[0] === host : e.labels.every((l, i) => l === '*' || l === labels[i])) return e;
    }
    throw notAllowed();
  }

  /**
   * Checks `url` against the tenant's allow-list, resolves its host once, checks every address,
   * and returns a dispatcher pinned to the checked address. Throws (nothing sent) otherwise.
   */
  async resolve(tenantId: string, url: URL): Promise<EgressTarget> {
    const entry = this.match(tenantId, url);
    const host = hostOf(url);
    let addresses: string[];
    if (isIP(host) !== 0) addresses = [host];
    else {
      try {
        addresses = await withTimeout(this.lookup(host), Math.min(entry.timeoutMs, MAX_CONNECT_TIMEOUT_MS));
      } catch (err) {
        throw new ServiceError('destination_unresolvable', { detail: "The destination's host name could not be resolved; nothing was sent", cause: err });
      }
      if (addresses.length === 0) throw new ServiceError('destination_unresolvable', { detail: "The destination's host name could not be resolved; nothing was sent" });
    }
    // Only an entry that names this host (or address) exactly may reach an internal address.
    // Any internal address among several refuses the request: a mixed answer is how rebinding starts.
    if (entry.wildcard && addresses.some(isInternalAddress)) throw refusedAddress();
    const address = addresses[0]!;
    return { origin: url.origin, address, dispatcher: await this.pool(url.origin, address, entry) };
  }

  private async pool(origin: string, address: string, entry: AllowedEntry): Promise<Pool> {
    // undici on first use: the model (and `tokenproxy check-config`) builds this policy without
    // ever sending anything. Loaded before the lookup, so two requests cannot both make a pool.
    const { buildConnector, Pool } = await (undici ??= import('undici'));
    const key = `${entry.index}|${origin}|${address}`;
    let pool = this.pools.get(key);
    if (pool) {
      // Most recently used last, so the first is the one to retire.
      this.pools.delete(key);
      this.pools.set(key, pool);
      return pool;
    }
    const timeout = Math.min(entry.timeoutMs, MAX_CONNECT_TIMEOUT_MS);
    const connector = buildConnector({ timeout, ...(entry.ca ? { ca: [...rootCertificates, entry.ca] } : {}) });
    pool = new Pool(origin, {
      // undici takes the TLS server name (SNI) from the origin's host; the socket goes to `address`.
      connect: (options, callback) => connector({ ...options, hostname: address }, callback),
      headersTimeout: entry.timeoutMs,
      bodyTimeout: entry.timeoutMs,
      keepAliveTimeout: 4_000,
    });
    this.pools.set(key, pool);
    if (this.pools.size > MAX_POOLS) {
      const [oldKey, oldPool] = this.pools.entries().next().value as [string, Pool];
      this.pools.delete(oldKey);
      void oldPool.close().catch(() => {});
    }
    return pool;
  }

  async close(): Promise<void> {
    const pools = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(pools.map((p) => p.destroy()));
  }
}
