/**
 * The egress policy on its own (src/proxy/egress.ts): which addresses are internal, how origins
 * match the allow-list, and the start-up problems of a bad list. The HTTP paths (nothing sent on a
 * refusal) are in test/proxy/outbound.test.ts.
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../../src/config/load.js';
import { buildModel } from '../../src/model/compile.js';
import { EgressPolicy, isInternalAddress } from '../../src/proxy/egress.js';
import { ServiceError } from '../../src/errors.js';

const TENANT = '11111111-1111-4111-8111-111111111111';

/** The error `fn` throws (undefined when it returns). */
function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return undefined;
}

/** The compiled allow-lists of one tenant with `allowed` (the model's egress policy, issue 25). */
function tenants(allowed: unknown[]) {
  return buildModel({ tenants: [{ id: TENANT, name: 't', outbound: { allowed_destinations: allowed } }] }, { env: {} }).model.egress.byTenant;
}

t.test('internal addresses', async (t) => {
  const internal = [
    '127.0.0.1', '127.0.0.2', '10.1.2.3', '172.16.0.1', '172.31.255.255', '192.168.1.1', '100.64.0.1', '100.100.100.200',
    '169.254.169.254', '169.254.0.1', '0.0.0.0', '224.0.0.1', '255.255.255.255', '192.0.0.192', '198.18.0.1',
    '::', '::1', 'fe80::1', 'fc00::1', 'fd00:ec2::254', 'ff02::1', 'fec0::1',
    '::ffff:127.0.0.1', '::ffff:7f00:1', '::ffff:169.254.169.254', '::ffff:a9fe:a9fe', '::ffff:10.0.0.1',
    '64:ff9b::7f00:1', '64:ff9b::a9fe:a9fe', '2002:7f00:1::1', '2002:a9fe:a9fe::', '::127.0.0.1',
    'not-an-address',
  ];
  for (const a of internal) t.ok(isInternalAddress(a), `${a} is internal`);
  const external = ['8.8.8.8', '1.1.1.1', '172.32.0.1', '100.128.0.1', '2606:4700:4700::1111', '::ffff:8.8.8.8', '64:ff9b::808:808', '2002:808:808::1'];
  for (const a of external) t.notOk(isInternalAddress(a), `${a} is not internal`);
});

t.test('origins match by scheme, host labels and port', async (t) => {
  const policy = new EgressPolicy(tenants(['https://*.stripe.com', 'http://127.0.0.1:9090', 'https://api.example.com:8443', 'https://[::1]:8443']));
  t.teardown(() => policy.close());
  const ok = (u: string) => t.doesNotThrow(() => policy.match(TENANT, new URL(u)), `${u} matches`);
  const refused = (u: string) => {
    const e = thrown(() => policy.match(TENANT, new URL(u)));
    t.ok(e instanceof ServiceError && e.code === 'destination_not_allowed', `${u} does not match`);
  };
  ok('https://api.stripe.com/v1/charges');
  ok('https://API.Stripe.COM');
  ok('https://api.stripe.com:443/');
  ok('http://127.0.0.1:9090/x');
  ok('https://api.example.com:8443');
  ok('https://[::1]:8443/');
  refused('https://stripe.com'); // * is exactly one label
  refused('https://a.b.stripe.com');
  refused('http://api.stripe.com'); // scheme
  refused('https://api.stripe.com:8443'); // port
  refused('https://evilstripe.com');
  refused('https://api.stripe.com.evil.example');
  refused('http://127.0.0.1:9091');
  refused('http://127.0.0.2:9090');
  refused('https://api.example.com');
  refused('http://localhost:9090');
  // Another tenant has no list at all.
  t.throws(() => policy.match('22222222-2222-4222-8222-222222222222', new URL('https://api.stripe.com')), { code: 'destination_not_allowed' });
});

t.test('resolve: a wildcard entry never reaches an internal address; an exact one may', async (t) => {
  // A name under the wildcard that resolves to loopback (as a hostile DNS answer would).
  const loopback = new EgressPolicy(tenants(['http://*.example.com:8080']), { lookup: async () => ['127.0.0.1'] });
  t.teardown(() => loopback.close());
  await t.rejects(loopback.resolve(TENANT, new URL('http://internal.example.com:8080/')), { code: 'destination_address_refused' });
  const policy = new EgressPolicy(tenants(['http://localhost:9090', 'http://*.tokenproxy.invalid:80']));
  t.teardown(() => policy.close());
  const target = await policy.resolve(TENANT, new URL('http://localhost:9090/'));
  t.ok(isInternalAddress(target.address), 'named exactly: the loopback address is allowed');
  t.equal(target.origin, 'http://localhost:9090');
  await t.rejects(policy.resolve(TENANT, new URL('http://no-such-host.tokenproxy.invalid/')), { code: 'destination_unresolvable' });
});

t.test('a DNS lookup that never answers ends within the timeout', async (t) => {
  const ts = buildModel({ tenants: [{ id: TENANT, name: 't', outbound: { allowed_destinations: ['https://*.example.com'], timeout_ms: 50 } }] }, { env: {} }).model.egress.byTenant;
  const policy = new EgressPolicy(ts, { lookup: () => new Promise<string[]>(() => {}) });
  t.teardown(() => policy.close());
  await t.rejects(policy.resolve(TENANT, new URL('https://api.example.com/')), { code: 'destination_unresolvable' });
});

t.test('a name resolving to a mix of public and internal addresses is refused (rebinding)', async (t) => {
  const policy = new EgressPolicy(tenants(['https://*.example.com']), { lookup: async () => ['93.184.216.34', '127.0.0.1'] });
  t.teardown(() => policy.close());
  await t.rejects(policy.resolve(TENANT, new URL('https://api.example.com/')), { code: 'destination_address_refused' });
  const ok = new EgressPolicy(tenants(['https://*.example.com']), { lookup: async () => ['93.184.216.34'] });
  t.teardown(() => ok.close());
  t.equal((await ok.resolve(TENANT, new URL('https://api.example.com/'))).address, '93.184.216.34', 'a public address is used as resolved');
});

t.test('a bad allow-list stops start-up with a clear problem', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'egress-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const notPem = join(dir, 'not.pem');
  writeFileSync(notPem, 'hello');
  const bad: Array<[unknown, RegExp]> = [
    ['ftp://example.com', /must be an origin/],
    ['https://example.com/path', /must be an origin/],
    ['https://user:pw@example.com', /credentials|must be an origin/],
    ['https://ex*ample.com', /whole-label \* wildcard/],
    ['https://*', /a wildcard needs a fixed domain/], // every single-label host (issue 23)
    ['https://*.*', /a wildcard needs a fixed domain/],
    ['https://*.com', /a wildcard needs a fixed domain/],
    ['https://example.com:99999', /port/],
    [{ origin: 'https://example.com', tls: { ca_file: join(dir, 'missing.pem') } }, /cannot read/],
    [{ origin: 'https://example.com', tls: { ca_file: notPem } }, /no PEM certificate/],
    [{ origin: 'http://example.com', tls: { ca_file: notPem } }, /only an https destination/],
  ];
  for (const [entry, message] of bad) {
    const e = thrown(() => tenants([entry]));
    t.ok(
      e instanceof ConfigError && e.problems.some((p) => p.startsWith('tenants[0].outbound.allowed_destinations[0]') && message.test(p)),
      `${JSON.stringify(entry)} is refused`,
      { problems: e instanceof ConfigError ? e.problems : e },
    );
  }
  t.same(buildModel({ tenants: [{ id: TENANT, name: 't' }] }, { env: {} }).config.tenants[0]!.outbound.allowed_destinations, [], 'default: empty, so every destination is refused');
});
