/**
 * The client IP that per-IP rate limits count by.
 *
 * It is the socket's peer address, unless that peer is a trusted proxy (`server.trust_proxy`,
 * CIDRs or single addresses, IPv4 and IPv6). Then X-Forwarded-For is walked from the right, past
 * the trusted proxies, and the first address that is not trusted is the client: every hop to its
 * right was appended by a proxy we trust, everything to its left is the client's own claim
 * (RFC 7239 §5.2 discusses the same reasoning for `Forwarded`). A spoofed X-Forwarded-For from an
 * untrusted peer is never read.
 *
 * IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`, what a dual-stack socket reports for IPv4 peers)
 * are matched as, and returned as, their IPv4 form, so one client has one counter.
 *
 * Per-IP rate limits count an IPv6 client by its network (`addressBlock`): a host is
 * usually given a whole /64 and may pick any address in it, so counting full addresses let one
 * host rotate past every per-IP limit.
 */
import { BlockList, isIP } from 'node:net';

export type ClientIpResolver = (socketAddress: string, xForwardedFor: string | undefined) => string;

export interface ParsedCidr {
  address: string;
  prefix: number;
  family: 'ipv4' | 'ipv6';
}

const MAPPED_V4 = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i;

/**
 * `::ffff:a.b.c.d` → `a.b.c.d`, also when written in hex (`::ffff:c000:201`) or in full
 * (`0:0:0:0:0:ffff:…`); other addresses unchanged.
 */
export function normalizeIp(address: string): string {
  const m = MAPPED_V4.exec(address);
  if (m) return m[1];
  if (!/ffff:/i.test(address)) return address;
  const words = ipv6Words(address);
  return words !== undefined && isMappedV4(words) ? mappedV4(words) : address;
}

function isMappedV4(w: readonly number[]): boolean {
  return w[0] === 0 && w[1] === 0 && w[2] === 0 && w[3] === 0 && w[4] === 0 && w[5] === 0xffff;
}

function mappedV4(w: readonly number[]): string {
  return `${w[6]! >> 8}.${w[6]! & 0xff}.${w[7]! >> 8}.${w[7]! & 0xff}`;
}

/** A CIDR (`10.0.0.0/8`, `fd00::/8`) or a single address; undefined when invalid. */
export function parseCidr(text: string): ParsedCidr | undefined {
  const [rawAddress, rawPrefix, extra] = text.trim().split('/');
  if (extra !== undefined || rawAddress === undefined) return undefined;
  let address = rawAddress;
  let family: 'ipv4' | 'ipv6';
  let prefix: number;
  const mapped = MAPPED_V4.exec(address);
  if (mapped) {
    // ::ffff:10.0.0.0/104 is 10.0.0.0/8.
    address = mapped[1];
    family = 'ipv4';
    if (rawPrefix !== undefined && !/^\d+$/.test(rawPrefix)) return undefined;
    prefix = rawPrefix === undefined ? 32 : Number(rawPrefix) - 96;
  } else {
    const v = isIP(address);
    if (v === 0) return undefined;
    family = v === 4 ? 'ipv4' : 'ipv6';
    const max = v === 4 ? 32 : 128;
    if (rawPrefix !== undefined && !/^\d+$/.test(rawPrefix)) return undefined;
    prefix = rawPrefix === undefined ? max : Number(rawPrefix);
  }
  const max = family === 'ipv4' ? 32 : 128;
  if (isIP(address) !== (family === 'ipv4' ? 4 : 6) || prefix < 0 || prefix > max) return undefined;
  return { address, prefix, family };
}

/** One X-Forwarded-For element as an address: trims, drops `[...]` and a port; undefined when not an IP. */
function forwardedAddress(element: string): string | undefined {
  let a = element.trim();
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(a);
  if (bracketed) a = bracketed[1];
  else if (/^\d{1,3}(?:\.\d{1,3}){3}:\d+$/.test(a)) a = a.slice(0, a.lastIndexOf(':'));
  return isIP(a) === 0 ? undefined : normalizeIp(a);
}

/**
 * Builds the resolver once (CIDRs parsed into a `BlockList`); throws on an invalid entry, so a
 * config mistake fails at start-up.
 */
/** Whether a socket peer is one of `server.trust_proxy` (false for everything when the list is empty). */
export function createPeerTrust(trustProxy: readonly string[]): (address: string) => boolean {
  if (trustProxy.length === 0) return () => false;
  const trusted = new BlockList();
  for (const entry of trustProxy) {
    const c = parseCidr(entry);
    if (!c) throw new Error(`server.trust_proxy: ${JSON.stringify(entry)} is not an IP address or CIDR`);
    trusted.addSubnet(c.address, c.prefix, c.family);
  }
  return (address) => {
    const a = normalizeIp(address);
    const family = isIP(a);
    return family !== 0 && trusted.check(a, family === 6 ? 'ipv6' : 'ipv4');
  };
}

export function createClientIp(trustProxy: readonly string[]): ClientIpResolver {
  if (trustProxy.length === 0) return (socketAddress) => normalizeIp(socketAddress);
  const isTrusted = createPeerTrust(trustProxy);

  return (socketAddress, xForwardedFor) => {
    let client = normalizeIp(socketAddress);
    if (!xForwardedFor || isIP(client) === 0 || !isTrusted(client)) return client;
    const hops = xForwardedFor.split(',');
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = forwardedAddress(hops[i]);
      // Garbage where a trusted proxy should have written an address: stop at the last hop we
      // could verify rather than count by a string the client may have chosen.
      if (hop === undefined) return client;
      client = hop;
      if (!isTrusted(hop)) return hop;
    }
    // Every hop is a trusted proxy: the left-most is the furthest one known.
    return client;
  };
}

/** The 8 hextets of an IPv6 address (zone id dropped, a dotted IPv4 tail read); undefined when not one. */
function ipv6Words(address: string): number[] | undefined {
  let a = address;
  const zone = a.indexOf('%');
  if (zone !== -1) a = a.slice(0, zone);
  if (isIP(a) !== 6) return undefined;
  const lastColon = a.lastIndexOf(':');
  if (a.includes('.', lastColon)) {
    // `…:1.2.3.4`: the IPv4 tail is the last two hextets.
    const [b0, b1, b2, b3] = a.slice(lastColon + 1).split('.').map(Number) as [number, number, number, number];
    a = `${a.slice(0, lastColon + 1)}${((b0 << 8) | b1).toString(16)}:${((b2 << 8) | b3).toString(16)}`;
  }
  const hex = (part: string) => (part === '' ? [] : part.split(':').map((h) => parseInt(h, 16)));
  const gap = a.indexOf('::');
  let words: number[];
  if (gap === -1) words = hex(a);
  else {
    const head = hex(a.slice(0, gap));
    const rest = hex(a.slice(gap + 2));
    words = [...head, ...new Array<number>(Math.max(0, 8 - head.length - rest.length)).fill(0), ...rest];
  }
  return words.length === 8 ? words : undefined;
}

/**
 * What per-IP rate limits count a client address by: an IPv4 address (an IPv4-mapped
 * IPv6 one, dotted or hex, counts as its IPv4 form) as it is; an IPv6 address as its network of
 * `ipv6Prefix` bits (`server.ipv6_prefix`, default 64), written `<network hextets>/<prefix>`, so
 * every address a host can choose inside its /64, however it is spelt, is one client. Anything
 * else (no address) is returned unchanged.
 */
export function addressBlock(address: string, ipv6Prefix: number): string {
  if (!address.includes(':')) return address;
  const words = ipv6Words(address);
  if (words === undefined) return address;
  if (isMappedV4(words)) return mappedV4(words);
  const out: string[] = [];
  for (let i = 0, bits = ipv6Prefix; i < 8 && bits > 0; i++, bits -= 16) {
    const mask = bits >= 16 ? 0xffff : (0xffff << (16 - bits)) & 0xffff;
    out.push((words[i]! & mask).toString(16));
  }
  return `${out.join(':')}/${ipv6Prefix}`;
}
