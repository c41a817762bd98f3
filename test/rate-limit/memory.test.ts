/**
 * RateLimitService on the memory store: every rule through check(), throttle vs block timing,
 * the strictest-rule decision, counter scoping.
 */
import t from 'tap';
import { RateLimitService } from '../../src/rate-limit/limiter.js';
import { ROUTE_GROUPS, type RuleName } from '../../src/rate-limit/rules.js';
import { captureLog, expect429, memoryConfig, sleep, tenantWith, type Subject } from './fixtures.js';

const { log } = captureLog();
const service = () => {
  const s = RateLimitService.create(memoryConfig(), { log });
  t.teardown(() => s.close());
  return s;
};

/** A request each rule (but legacy_portal) applies to. */
const SUBJECTS: Record<Exclude<RuleName, 'legacy_portal'>, Omit<Subject, 'tenant'> & { test?: boolean }> = {
  test_tenant: { route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private', test: true },
  management_key: { route: 'management', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'management' },
  public_key: { route: 'tokenize', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'public' },
  proxy_endpoint: { route: 'proxy', clientIp: '192.0.2.1', proxyKeyId: 'p1' },
  private_key: { route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private' },
  listing_tokens: { route: 'tokens.list', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private' },
  creating_tokens: { route: 'tokens.create', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private' },
  legacy_global: { route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private', legacy: true },
  legacy_tokens_search_post: { route: 'tokens.search.post', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private', legacy: true },
  legacy_tokens_list: { route: 'tokens.list', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private', legacy: true },
  legacy_tokens_create: { route: 'tokenize', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private', legacy: true },
};

t.test('every rule: N allowed, N+1 gets 429 naming the rule', async (t) => {
  const limits = service();
  for (const [rule, s] of Object.entries(SUBJECTS)) {
    const { test = false, ...rest } = s;
    const tenant = tenantWith({ [rule]: { points: 2, duration_seconds: 30 } }, { test });
    const subject: Subject = { tenant, ...rest };
    const first = await limits.check(subject);
    t.same(first.headers, { 'RateLimit-Limit': '2', 'RateLimit-Remaining': '1', 'RateLimit-Reset': '30' }, `${rule}: 1st`);
    t.equal((await limits.check(subject)).headers['RateLimit-Remaining'], '0', `${rule}: 2nd`);
    const e = await expect429(t, limits.check(subject), 2, undefined, rule);
    t.match(e.detail, new RegExp(`"${rule}"`), `${rule}: detail names the rule`);
  }
});

t.test('legacy_portal is attached to no route', async (t) => {
  const limits = service();
  const tenant = tenantWith({ legacy_portal: { points: 1, duration_seconds: 30 } });
  for (const route of ROUTE_GROUPS) {
    for (let i = 0; i < 3; i++) {
      await limits.check({ tenant, route, clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private', legacy: true, proxyKeyId: 'p' });
    }
  }
  t.pass('never limited');
});

t.test('throttle: 429 until the window admits again', async (t) => {
  const limits = service();
  const tenant = tenantWith({ private_key: { points: 3, duration_seconds: 1 } });
  const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private' };
  for (let i = 0; i < 3; i++) await limits.check(s);
  await expect429(t, limits.check(s), 3, 1);
  await expect429(t, limits.check(s), 3, 1, 'still throttled');
  await sleep(1050);
  t.same((await limits.check(s)).headers, { 'RateLimit-Limit': '3', 'RateLimit-Remaining': '2', 'RateLimit-Reset': '1' }, 'new window');
});

t.test('block: stays blocked for its duration after the window passed, then recovers', async (t) => {
  const limits = service();
  const tenant = tenantWith({ public_key: { points: 2, duration_seconds: 0.5, block_seconds: 1.5 } });
  const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'public' };
  await limits.check(s);
  await limits.check(s);
  const started = Date.now();
  await expect429(t, limits.check(s), 2, 2, 'blocked (1.5 s rounded up)');
  await sleep(700); // the 0.5 s window is long gone
  const e = await expect429(t, limits.check(s), 2, 1, 'still blocked after the window');
  t.ok(e.headers);
  await sleep(1550 - (Date.now() - started));
  t.equal((await limits.check(s)).headers['RateLimit-Remaining'], '1', 'recovered after the block');
});

t.test('a custom throttle→block and block→throttle change the behaviour', async (t) => {
  const limits = service();
  const tenant = tenantWith({
    private_key: { points: 1, duration_seconds: 0.3, mitigation: 'block', block_seconds: 1 },
    public_key: { points: 1, duration_seconds: 0.3, mitigation: 'throttle' },
  });
  const priv: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'a', keyKind: 'private' };
  const pub: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'b', keyKind: 'public' };
  await limits.check(priv);
  await limits.check(pub);
  await expect429(t, limits.check(priv), 1);
  await expect429(t, limits.check(pub), 1);
  await sleep(400);
  await expect429(t, limits.check(priv), 1, 1, 'block rule still blocked');
  await limits.check(pub);
  t.pass('throttle rule admits in its next window');
});

t.test('every matching rule counts; the strictest decides', async (t) => {
  const limits = service();
  const tenant = tenantWith({ private_key: { points: 5, duration_seconds: 30 }, creating_tokens: { points: 2, duration_seconds: 10 } });
  const create: Subject = { tenant, route: 'tokenize', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' };
  const read: Subject = { ...create, route: 'tokens.read' };
  t.same((await limits.check(create)).headers, { 'RateLimit-Limit': '2', 'RateLimit-Remaining': '1', 'RateLimit-Reset': '10' }, 'fewest left');
  await limits.check(create);
  await expect429(t, limits.check(create), 2, 10, 'creating_tokens decides');
  // private_key counted all three (the rejected one too): 5 - 4 = 1 left after this read.
  t.same((await limits.check(read)).headers, { 'RateLimit-Limit': '5', 'RateLimit-Remaining': '1', 'RateLimit-Reset': '30' });
  await limits.check(read);
  // Both over now: the longest wait wins.
  await expect429(t, limits.check(create), 5, 30, 'longest retry');
});

t.test('counter scoping', async (t) => {
  const limits = service();
  const tenant = tenantWith({
    public_key: { points: 1, duration_seconds: 30 },
    private_key: { points: 1, duration_seconds: 30 },
    proxy_endpoint: { points: 1, duration_seconds: 30 },
    legacy_global: { points: 1, duration_seconds: 30 },
  });
  const pub = (ip: string): Subject => ({ tenant, route: 'tokens.read', clientIp: ip, apiKeyId: 'pub', keyKind: 'public' });
  await limits.check(pub('192.0.2.1'));
  await limits.check(pub('192.0.2.2'));
  await expect429(t, limits.check(pub('192.0.2.1')), 1, undefined, 'public key: same key+ip');

  const priv = (key: string, ip = '192.0.2.9'): Subject => ({ tenant, route: 'tokens.read', clientIp: ip, apiKeyId: key, keyKind: 'private' });
  await limits.check(priv('a'));
  await limits.check(priv('b'));
  await expect429(t, limits.check(priv('a', '192.0.2.10')), 1, undefined, 'private key counts by key, any ip');

  const proxy = (key: string): Subject => ({ tenant, route: 'proxy', clientIp: '192.0.2.1', proxyKeyId: key });
  await limits.check(proxy('p1'));
  await limits.check(proxy('p2'));
  await expect429(t, limits.check(proxy('p1')), 1, undefined, 'proxy by proxy key');

  const legacy = (key: string, ip: string): Subject => ({ tenant, route: 'reactor', clientIp: ip, apiKeyId: key, keyKind: 'management', legacy: true });
  await limits.check(legacy('x', '198.51.100.1'));
  await limits.check(legacy('x', '198.51.100.2'));
  await expect429(t, limits.check(legacy('y', '198.51.100.1')), 1, undefined, 'legacy rules count by ip across keys');

  const other = tenantWith({ private_key: { points: 1, duration_seconds: 30 } });
  await limits.check({ ...priv('a'), tenant: other });
  t.pass('another tenant with the same key id counts apart');
});

t.test('a rule without its counter identity does not count', async (t) => {
  const limits = service();
  const tenant = tenantWith({ proxy_endpoint: { points: 1, duration_seconds: 30 }, private_key: { points: 1, duration_seconds: 30 } });
  for (let i = 0; i < 3; i++) t.same((await limits.check({ tenant, route: 'proxy', clientIp: '192.0.2.1' })).headers, {});
  for (let i = 0; i < 3; i++) await limits.check({ tenant, route: 'tokens.read', clientIp: '192.0.2.1', keyKind: 'private' });
});

t.test('health is never limited; disabled is a no-op', async (t) => {
  const limits = service();
  const tenant = tenantWith({ private_key: { points: 1, duration_seconds: 30 } });
  for (let i = 0; i < 3; i++) {
    t.same((await limits.check({ tenant, route: 'health', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' })).headers, {});
  }
  const off = RateLimitService.create(memoryConfig({ enabled: false }), { log });
  for (let i = 0; i < 3; i++) {
    t.same((await off.check({ tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' })).headers, {});
  }
  await off.close();
});

t.test('counters survive a re-resolved tenant object with the same limits', async (t) => {
  const limits = service();
  const tenant = tenantWith({ private_key: { points: 2, duration_seconds: 30 } });
  const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' };
  await limits.check(s);
  const copy = { ...tenant, custom_rate_limits: { private_key: { points: 2, duration_seconds: 30 } } };
  await limits.check({ ...s, tenant: copy });
  await expect429(t, limits.check({ ...s, tenant: copy }), 2);
  // A changed limit applies at once (a new limiter); the old one is kept for tenants still on it.
  const raised = { ...tenant, custom_rate_limits: { private_key: { points: 5, duration_seconds: 30 } } };
  t.equal((await limits.check({ ...s, tenant: raised })).headers['RateLimit-Limit'], '5');
});

t.test('higher tier and test tenant defaults', async (t) => {
  const limits = service();
  const higher = tenantWith({}, { rate_limit_tier: 'higher' });
  const h = await limits.check({ tenant: higher, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' });
  t.equal(h.headers['RateLimit-Limit'], '2000');
  const test = tenantWith({}, { test: true, rate_limit_tier: 'higher' });
  const tt = await limits.check({ tenant: test, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' });
  t.equal(tt.headers['RateLimit-Limit'], '50', 'test tenant: 50 / 10 s in the higher tier too');
});
