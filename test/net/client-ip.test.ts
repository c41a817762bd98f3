import fc from 'fast-check';
import t from 'tap';
import { createClientIp, normalizeIp, parseCidr } from '../../src/net/client-ip.js';

t.test('no trusted proxies: the socket address, X-Forwarded-For ignored', async (t) => {
  const ip = createClientIp([]);
  t.equal(ip('203.0.113.9', undefined), '203.0.113.9');
  t.equal(ip('203.0.113.9', '1.2.3.4'), '203.0.113.9');
  t.equal(ip('::ffff:203.0.113.9', '1.2.3.4'), '203.0.113.9', 'IPv4-mapped peer normalized');
  t.equal(ip('2001:db8::1', '1.2.3.4'), '2001:db8::1');
});

t.test('spoofed X-Forwarded-For from an untrusted peer changes nothing', async (t) => {
  const ip = createClientIp(['10.0.0.0/8', '127.0.0.1', 'fd00::/8']);
  t.equal(ip('198.51.100.7', '10.0.0.1'), '198.51.100.7', 'claims to be a trusted proxy');
  t.equal(ip('198.51.100.7', '203.0.113.1, 10.0.0.2'), '198.51.100.7');
  t.equal(ip('2001:db8::7', '203.0.113.1'), '2001:db8::7');
  t.equal(ip('::ffff:198.51.100.7', '203.0.113.1'), '198.51.100.7');
});

t.test('trusted peer: the right-most untrusted X-Forwarded-For address', async (t) => {
  const ip = createClientIp(['10.0.0.0/8', '127.0.0.1', 'fd00::/8']);
  t.equal(ip('10.1.2.3', '203.0.113.5'), '203.0.113.5');
  t.equal(ip('127.0.0.1', '203.0.113.5'), '203.0.113.5');
  t.equal(ip('::ffff:127.0.0.1', '203.0.113.5'), '203.0.113.5', 'IPv4-mapped trusted peer');
  t.equal(ip('10.1.2.3', '1.1.1.1, 203.0.113.5, 10.9.9.9'), '203.0.113.5', 'client-supplied left part ignored');
  t.equal(ip('10.1.2.3', 'spoofed-garbage, 203.0.113.5'), '203.0.113.5');
  t.equal(ip('fd00::1', '2001:db8::42'), '2001:db8::42', 'IPv6 trusted peer and client');
  t.equal(ip('fd00::1', '[2001:db8::42]:443'), '2001:db8::42', 'bracketed with port');
  t.equal(ip('10.1.2.3', '203.0.113.5:8080'), '203.0.113.5', 'IPv4 with port');
  t.equal(ip('10.1.2.3', '::ffff:203.0.113.5'), '203.0.113.5', 'IPv4-mapped hop normalized');
  t.equal(ip('10.1.2.3', ' 203.0.113.5 ,10.0.0.9 '), '203.0.113.5', 'whitespace');
});

t.test('trusted peer without a usable X-Forwarded-For', async (t) => {
  const ip = createClientIp(['10.0.0.0/8']);
  t.equal(ip('10.1.2.3', undefined), '10.1.2.3');
  t.equal(ip('10.1.2.3', ''), '10.1.2.3');
  t.equal(ip('10.1.2.3', '10.0.0.5, 10.0.0.6'), '10.0.0.5', 'all hops trusted: the left-most');
  t.equal(ip('10.1.2.3', 'not-an-ip'), '10.1.2.3', 'garbage right after a trusted hop: the trusted hop');
  t.equal(ip('10.1.2.3', 'not-an-ip, 10.0.0.5'), '10.0.0.5');
});

t.test('CIDR parsing', async (t) => {
  t.same(parseCidr('10.0.0.0/8'), { address: '10.0.0.0', prefix: 8, family: 'ipv4' });
  t.same(parseCidr('192.168.1.1'), { address: '192.168.1.1', prefix: 32, family: 'ipv4' });
  t.same(parseCidr('fd00::/8'), { address: 'fd00::', prefix: 8, family: 'ipv6' });
  t.same(parseCidr('::1'), { address: '::1', prefix: 128, family: 'ipv6' });
  t.same(parseCidr('::ffff:10.0.0.0/104'), { address: '10.0.0.0', prefix: 8, family: 'ipv4' });
  t.same(parseCidr('::ffff:10.0.0.1'), { address: '10.0.0.1', prefix: 32, family: 'ipv4' });
  for (const bad of ['10.0.0.0/33', '10.0.0/8', 'fd00::/129', 'x', '10.0.0.0/8/1', '10.0.0.0/a', '', '::ffff:10.0.0.0/95']) {
    t.equal(parseCidr(bad), undefined, `rejects ${JSON.stringify(bad)}`);
  }
  t.throws(() => createClientIp(['10.0.0.0/8', 'nope']), /trust_proxy: "nope"/);
});

t.test('IPv4-mapped CIDR trusts the IPv4 peer', async (t) => {
  const ip = createClientIp(['::ffff:10.0.0.0/104']);
  t.equal(ip('10.2.3.4', '203.0.113.5'), '203.0.113.5');
  t.equal(ip('::ffff:10.2.3.4', '203.0.113.5'), '203.0.113.5');
  t.equal(normalizeIp('::FFFF:1.2.3.4'), '1.2.3.4');
  t.equal(normalizeIp('::1'), '::1');
  // Issue 31: a mapped address written in hex or in full is the same IPv4 client.
  t.equal(normalizeIp('::ffff:cb00:7107'), '203.0.113.7');
  t.equal(normalizeIp('0:0:0:0:0:FFFF:cb00:7107'), '203.0.113.7');
  t.equal(normalizeIp('2001:db8::ffff:1'), '2001:db8::ffff:1', 'ffff elsewhere is not a mapped address');
  const hexTrusted = createClientIp(['10.0.0.0/8']);
  t.equal(hexTrusted('10.1.2.3', '203.0.113.5, ::ffff:a00:9'), '203.0.113.5', 'a trusted hop written as hex-mapped is still trusted');
});

t.test('addressBlock: what per-IP rate limits count by (issue 31, finding 3)', async (t) => {
  const { addressBlock } = (await import('../../src/net/client-ip.js')) as { addressBlock?: (a: string, p: number) => string };
  t.type(addressBlock, 'function', 'client-ip exports addressBlock');
  if (!addressBlock) return;
  // IPv4 (and IPv4-mapped IPv6, dotted or hex) counts as the IPv4 address.
  t.equal(addressBlock('203.0.113.7', 64), '203.0.113.7');
  t.equal(addressBlock('::ffff:203.0.113.7', 64), '203.0.113.7');
  t.equal(addressBlock('::ffff:cb00:7107', 64), '203.0.113.7', 'mapped, written in hex');
  // IPv6 counts per /64: every address of one /64 is one block, however it is written.
  const block = addressBlock('2001:db8:1:2::1', 64);
  for (const a of ['2001:db8:1:2::2', '2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:DB8:1:2:a:b:c:d', '2001:0db8:0001:0002:0000:0000:0000:0009', '2001:db8:1:2::1%eth0', '2001:db8:1:2:0:0:1.2.3.4']) {
    t.equal(addressBlock(a, 64), block, `${a} is in ${block}`);
  }
  t.not(addressBlock('2001:db8:1:3::1', 64), block, 'another /64 is another block');
  t.match(block, /\/64$/, 'the block names its prefix');
  // Other prefixes.
  t.equal(addressBlock('2001:db8:1:2::1', 48), addressBlock('2001:db8:1:ffff::1', 48), '/48: one block');
  t.not(addressBlock('2001:db8:1:2::1', 48), addressBlock('2001:db8:2:2::1', 48));
  t.equal(addressBlock('2001:db8:1:2:3:4:5:6', 56), addressBlock('2001:db8:1:ff::', 56), '/56: bits 49–56 of 0x0002 and 0x00ff are both 0');
  t.not(addressBlock('2001:db8:1:2::1', 128), addressBlock('2001:db8:1:2::2', 128), '/128: the full address');
  t.equal(addressBlock('2001:db8:1:2::1', 128), addressBlock('2001:0db8:1:2:0::1', 128), '/128: one spelling');
  t.not(addressBlock('2001:db8:1:2::1', 63), addressBlock('2001:db8:1:3::1', 63).replace('/63', '/64'), 'the prefix is part of the key');
  t.equal(addressBlock('2001:db8:1:2::1', 63), addressBlock('2001:db8:1:3::1', 63), '/63 spans ::2 and ::3');
});

t.test('addressBlock: addresses agree on their first `prefix` bits exactly when their blocks are equal', async (t) => {
  const { addressBlock } = await import('../../src/net/client-ip.js');
  const words = fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 8, maxLength: 8 });
  const write = (w: number[], compress: boolean) => {
    const full = w.map((x) => x.toString(16)).join(':');
    // Compressed: the first run of zero hextets as `::` (any run is valid IPv6).
    return compress ? full.replace(/(^|:)0(:0)+(:|$)/, '::') : full;
  };
  const sameBits = (a: number[], b: number[], bits: number) => {
    for (let i = 0; i < 128 && i < bits; i++) {
      const bit = (w: number[]) => (w[i >> 4]! >> (15 - (i & 15))) & 1;
      if (bit(a) !== bit(b)) return false;
    }
    return true;
  };
  const notMapped = (w: number[]) => !(w.slice(0, 5).every((x) => x === 0) && w[5] === 0xffff);
  fc.assert(
    fc.property(words, words, fc.integer({ min: 1, max: 128 }), fc.integer({ min: 0, max: 128 }), fc.boolean(), (a, b0, prefix, keep, compress) => {
      // b shares a's first `keep` bits, then has its own.
      const b = b0.map((x, i) => {
        const bits = Math.max(0, Math.min(16, keep - i * 16));
        const mask = bits === 0 ? 0 : (0xffff << (16 - bits)) & 0xffff;
        return (a[i]! & mask) | (x & ~mask & 0xffff);
      });
      fc.pre(notMapped(a) && notMapped(b));
      return (addressBlock(write(a, compress), prefix) === addressBlock(write(b, !compress), prefix)) === sameBits(a, b, prefix);
    }),
    { seed: 20_261_125, numRuns: 20_000 },
  );
  t.pass('20,000 generated pairs of addresses and prefixes');
});
