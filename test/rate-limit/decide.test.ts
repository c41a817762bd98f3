/** The strictest-rule decision, on its own (pure). */
import t from 'tap';
import { RateLimiterRes } from 'rate-limiter-flexible';
import { decide, NO_LIMITS, seconds, type Outcome } from '../../src/rate-limit/decide.js';
import { ServiceError } from '../../src/errors.js';

const rule = (name: string, points: number) => ({ name, limits: { points } });
const ok = (name: string, points: number, remaining: number, ms: number): Outcome => ({
  rule: rule(name, points),
  res: new RateLimiterRes(remaining, ms, points - remaining),
  over: false,
});
const over = (name: string, points: number, ms: number): Outcome => ({ rule: rule(name, points), res: new RateLimiterRes(0, ms, points + 1), over: true });
const failed = (name: string, error: unknown): Outcome => ({ rule: rule(name, 1), error });

function thrown(f: () => unknown): ServiceError {
  try {
    f();
  } catch (e) {
    if (e instanceof ServiceError) return e;
  }
  throw new Error('no ServiceError');
}

t.test('no rule: no headers', async (t) => {
  t.equal(decide([]), NO_LIMITS);
});

t.test('admitted: headers of the rule with the fewest points left', async (t) => {
  t.same(decide([ok('a', 100, 50, 9_000), ok('b', 10, 3, 2_500)]).headers, { 'RateLimit-Limit': '10', 'RateLimit-Remaining': '3', 'RateLimit-Reset': '3' });
  t.same(decide([ok('a', 5, 0, 1_000), ok('b', 10, 0, 7_001)]).headers, { 'RateLimit-Limit': '10', 'RateLimit-Remaining': '0', 'RateLimit-Reset': '8' }, 'tie: later reset');
  t.same(decide([ok('a', 5, 4, -1)]).headers['RateLimit-Reset'], '0', 'no expiry');
});

t.test('over: 429 with the longest wait', async (t) => {
  const e = thrown(() => decide([ok('a', 100, 1, 9_000), over('b', 10, 1_200), over('c', 20, 4_100)]));
  t.equal(e.code, 'rate_limited');
  t.equal(e.status, 429);
  t.same(e.headers, { 'RateLimit-Limit': '20', 'RateLimit-Remaining': '0', 'RateLimit-Reset': '5', 'Retry-After': '5' });
  t.match(e.detail, /"c" exceeded; retry after 5 s/);
  t.equal(thrown(() => decide([over('b', 10, 0)])).headers?.['Retry-After'], '1', 'at least 1 s');
});

t.test('store failure: 503, unless a rule is known to be over', async (t) => {
  const cause = new Error('boom');
  const e = thrown(() => decide([ok('a', 100, 1, 9_000), failed('b', cause)]));
  t.equal(e.code, 'rate_limit_unavailable');
  t.equal(e.status, 503);
  t.equal(e.cause, cause);
  t.equal(e.headers, undefined);
  t.equal(thrown(() => decide([failed('b', cause), over('c', 3, 1_000)])).code, 'rate_limited');
  t.equal(thrown(() => decide([failed('b', undefined)])).code, 'rate_limit_unavailable', 'an undefined rejection still fails');
});

t.test('seconds()', async (t) => {
  t.equal(seconds(1), 1);
  t.equal(seconds(1000), 1);
  t.equal(seconds(1001), 2);
  t.equal(seconds(0), 0);
  t.equal(seconds(-1), 0);
});
