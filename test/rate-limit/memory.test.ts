/**
 * RateLimitService on the memory store: every rule through check(), throttle vs block timing,
 * the strictest-rule decision, counter scoping.
 */
import t from 'tap';
import { ServiceError } from '../../src/errors.js';
import { RateLimitService, type RateLimitDecision } from '../../src/rate-limit/limiter.js';
import { ROUTE_GROUPS, type RuleName } from '../../src/rate-limit/rules.js';
import { sleep } from '../helpers/wait.js';
import { captureLog, expect429, memoryConfig, onTime, outcome, reloadedWith, replay, tenantWith, type Outcome, type Subject } from './fixtures.js';

const { log } = captureLog();
const service = async () => {
  const s = await RateLimitService.create(memoryConfig(), { log });
  t.teardown(() => s.close());
  return s;
};

/**
 * Checks `s` every 20 ms until one is admitted (at most 10 s): the event the window and block tests
 * wait for, instead of sleeping a fixed time and hoping the machine kept up. Returns the admitted
 * decision, when that check started, and every 429 before it with when it started.
 */
async function untilAdmitted(limits: RateLimitService, s: Subject): Promise<{ decision: RateLimitDecision; at: number; rejected: Array<{ at: number; e: ServiceError }> }> {
  const rejected: Array<{ at: number; e: ServiceError }> = [];
  const deadline = Date.now() + 10_000;
  for (;;) {
    const at = Date.now();
    try {
      return { decision: await limits.check(s), at, rejected };
    } catch (e) {
      if (!(e instanceof ServiceError) || e.code !== 'rate_limited') throw e;
      rejected.push({ at, e });
    }
    if (Date.now() > deadline) throw new Error('still rate limited after 10 s');
    await sleep(20);
  }
}

/** A request each rule (but legacy_portal) applies to. */
const SUBJECTS: Record<Exclude<RuleName, 'legacy_portal'>, Omit<Subject, 'tenant'> & { test?: boolean }> = {
  test_tenant: { route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private', test: true },
  management_key: { route: 'management', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'management' },
  public_key: { route: 'tokenize', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'public' },
  public_key_total: { route: 'tokenize', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'public' },
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
  const limits = await service();
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
  const limits = await service();
  // One point: if the rule applied to any route, that route's second check would be a 429, or at
  // least its decision would name a limit of 1.
  const tenant = tenantWith({ legacy_portal: { points: 1, duration_seconds: 30 } });
  let checks = 0;
  for (const route of ROUTE_GROUPS) {
    for (let i = 0; i < 3; i++) {
      const d = await limits.check({ tenant, route, clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private', legacy: true, proxyKeyId: 'p' });
      t.not(d.headers['RateLimit-Limit'], '1', `${route} #${i + 1}: not decided by legacy_portal (${JSON.stringify(d.headers)})`);
      checks++;
    }
  }
  t.equal(checks, ROUTE_GROUPS.length * 3, 'every check on every route admitted');
});

t.test('throttle: 429 until the window admits again', async (t) => {
  const limits = await service();
  await onTime(t, async () => {
    const tenant = tenantWith({ private_key: { points: 3, duration_seconds: 1 } });
    const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'private' };
    // The window opens at the first check, after this instant.
    const windowOpened = Date.now();
    const burst: Outcome[] = [];
    for (let i = 0; i < 5; i++) burst.push(await outcome(limits.check(s)));
    const took = Date.now() - windowOpened;
    if (took >= 1000) return `the burst of 5 checks took ${took} ms, not within the 1 s window`;
    t.ok(burst.slice(0, 3).every((o) => 'decision' in o), 'three admitted');
    await expect429(t, replay(burst[3]!), 3, 1);
    await expect429(t, replay(burst[4]!), 3, 1, 'still throttled');
    const { decision, at, rejected } = await untilAdmitted(limits, s);
    t.ok(at - windowOpened >= 900, `admitted ${at - windowOpened} ms after the window opened: not before its 1 s ended`);
    t.ok(rejected.every(({ e }) => e.headers?.['Retry-After'] === '1'), 'every check until then was a 429 with Retry-After 1');
    t.same(decision.headers, { 'RateLimit-Limit': '3', 'RateLimit-Remaining': '2', 'RateLimit-Reset': '1' }, 'new window');
    return undefined;
  });
});

t.test('block: stays blocked for its duration after the window passed, then recovers', async (t) => {
  const limits = await service();
  await onTime(t, async () => {
    const tenant = tenantWith({ public_key: { points: 2, duration_seconds: 0.5, block_seconds: 1.5 } });
    const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k1', keyKind: 'public' };
    const windowOpened = Date.now();
    const burst: Outcome[] = [];
    for (let i = 0; i < 2; i++) burst.push(await outcome(limits.check(s)));
    // The block begins at the third check, after this instant.
    const blockedAt = Date.now();
    burst.push(await outcome(limits.check(s)));
    const took = Date.now() - windowOpened;
    if (took >= 500) return `the burst of 3 checks took ${took} ms, not within the 0.5 s window`;
    // One check once the window is surely over (the block began before the window ended, so
    // 700 ms after blockedAt is at least 200 ms past it) and before the block can have ended.
    await sleep(700 - (Date.now() - blockedAt));
    const midAt = Date.now();
    const mid = await outcome(limits.check(s));
    const midDone = Date.now() - blockedAt;
    if (midDone >= 1500) return `the check after the window came back ${midDone} ms after the block began, not within its 1.5 s`;
    t.ok(burst.slice(0, 2).every((o) => 'decision' in o), 'two admitted');
    await expect429(t, replay(burst[2]!), 2, 2, 'blocked (1.5 s rounded up)');
    // Checks during a block do not extend it (rate-limiter-flexible blocks on the first overflow).
    const stillBlocked = await expect429(t, replay(mid), 2, undefined, `still blocked ${midAt - blockedAt} ms after the block began: the 0.5 s window is long gone`);
    t.ok(['1', '2'].includes(String(stillBlocked.headers?.['Retry-After'])), 'Retry-After counts down what is left of the block');
    const { decision, at, rejected } = await untilAdmitted(limits, s);
    t.ok(rejected.every(({ e }) => ['1', '2'].includes(String(e.headers?.['Retry-After']))), 'every check until then: a 429 counting down the block');
    t.ok(at - blockedAt >= 1400, `admitted ${at - blockedAt} ms after the block began: not before its 1.5 s ended`);
    t.equal(decision.headers['RateLimit-Remaining'], '1', 'recovered after the block');
    return undefined;
  });
});

t.test('a custom throttle→block and block→throttle change the behaviour', async (t) => {
  const limits = await service();
  await onTime(t, async () => {
    // The block lasts 30 s: "still blocked" holds however slow the machine is, while the 0.3 s
    // window of both rules has long passed by the time the throttle rule admits again.
    const tenant = tenantWith({
      private_key: { points: 1, duration_seconds: 0.3, mitigation: 'block', block_seconds: 30 },
      public_key: { points: 1, duration_seconds: 0.3, mitigation: 'throttle' },
    });
    const priv: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'a', keyKind: 'private' };
    const pub: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'b', keyKind: 'public' };
    const opened = Date.now();
    const burst = [await outcome(limits.check(priv)), await outcome(limits.check(pub)), await outcome(limits.check(priv)), await outcome(limits.check(pub))];
    const took = Date.now() - opened;
    if (took >= 300) return `the burst of 4 checks took ${took} ms, not within the 0.3 s window`;
    t.ok('decision' in burst[0]! && 'decision' in burst[1]!, 'one admitted each');
    await expect429(t, replay(burst[2]!), 1);
    await expect429(t, replay(burst[3]!), 1);
    const admitted = await untilAdmitted(limits, pub);
    t.ok(admitted.at - opened >= 250, `throttle rule admits in its next window (${admitted.at - opened} ms)`);
    t.same(admitted.decision.headers, { 'RateLimit-Limit': '1', 'RateLimit-Remaining': '0', 'RateLimit-Reset': '1' }, 'a fresh window of one point');
    const e = await expect429(t, limits.check(priv), 1, undefined, 'block rule still blocked after its window');
    t.ok(Number(e.headers?.['Retry-After']) > 20, `Retry-After ${e.headers?.['Retry-After']} s: the 30 s block, not the 0.3 s window`);
    return undefined;
  });
});

t.test('every matching rule counts; the strictest decides', async (t) => {
  const limits = await service();
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
  const limits = await service();
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
  const apart = await limits.check({ ...priv('a'), tenant: other });
  t.same(apart.headers, { 'RateLimit-Limit': '1', 'RateLimit-Remaining': '0', 'RateLimit-Reset': '30' }, 'another tenant with the same key id counts apart (its first point)');
});

t.test('a rule without its counter identity does not count', async (t) => {
  const limits = await service();
  const tenant = tenantWith({ proxy_endpoint: { points: 1, duration_seconds: 30 }, private_key: { points: 1, duration_seconds: 30 } });
  for (let i = 0; i < 3; i++) t.same((await limits.check({ tenant, route: 'proxy', clientIp: '192.0.2.1' })).headers, {});
  for (let i = 0; i < 3; i++) t.same((await limits.check({ tenant, route: 'tokens.read', clientIp: '192.0.2.1', keyKind: 'private' })).headers, {}, 'no key id: private_key does not count');
});

t.test('health is never limited; disabled is a no-op', async (t) => {
  const limits = await service();
  const tenant = tenantWith({ private_key: { points: 1, duration_seconds: 30 } });
  for (let i = 0; i < 3; i++) {
    t.same((await limits.check({ tenant, route: 'health', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' })).headers, {});
  }
  const off = await RateLimitService.create(memoryConfig({ enabled: false }), { log });
  for (let i = 0; i < 3; i++) {
    t.same((await off.check({ tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' })).headers, {});
  }
  await off.close();
});

t.test('counters survive a re-resolved tenant object with the same limits', async (t) => {
  const limits = await service();
  const tenant = tenantWith({ private_key: { points: 2, duration_seconds: 30 } });
  const s: Subject = { tenant, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' };
  await limits.check(s);
  const copy = reloadedWith(tenant, { private_key: { points: 2, duration_seconds: 30 } });
  await limits.check({ ...s, tenant: copy });
  await expect429(t, limits.check({ ...s, tenant: copy }), 2);
  // A changed limit applies at once (a new limiter); the old one is kept for tenants still on it.
  const raised = reloadedWith(tenant, { private_key: { points: 5, duration_seconds: 30 } });
  t.equal((await limits.check({ ...s, tenant: raised })).headers['RateLimit-Limit'], '5');
});

t.test('higher tier and test tenant defaults', async (t) => {
  const limits = await service();
  const higher = tenantWith({}, { tier: 'higher' });
  const h = await limits.check({ tenant: higher, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' });
  t.equal(h.headers['RateLimit-Limit'], '2000');
  const test = tenantWith({}, { test: true, tier: 'higher' });
  const tt = await limits.check({ tenant: test, route: 'tokens.read', clientIp: '192.0.2.1', apiKeyId: 'k', keyKind: 'private' });
  t.equal(tt.headers['RateLimit-Limit'], '50', 'test tenant: 50 / 10 s in the higher tier too');
});
