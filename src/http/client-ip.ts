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
 */
import { BlockList, isIP } from 'node:net';

export type ClientIpResolver = (socketAddress: string, xForwardedFor: string | undefined) => string;

export interface ParsedCidr {
  address: string;
  prefix: number;
  family: 'ipv4' | 'ipv6';
}

const MAPPED_V4 = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i;

/** `::ffff:a.b.c.d` → `a.b.c.d`; other addresses unchanged. */
export function normalizeIp(address: string): string {
  const m = MAPPED_V4.exec(address);
  return m ? m[1] : address;
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
