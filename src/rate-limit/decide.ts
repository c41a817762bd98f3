/**
 * From what each matching rule's counter said to one answer (pure): every rule counted the
 * request; the strictest decides (docs/rate-limits.md).
 *
 * - Any rule over its limit → 429 rate_limited, Retry-After = the longest wait among them
 *   (seconds, rounded up, at least 1), RateLimit-* of that rule.
 * - Else any store failure → 503 rate_limit_unavailable (the caller already replaced failures with
 *   the insurance limiter's answer in `allow` mode).
 * - Else RateLimit-Limit / -Remaining / -Reset of the rule with the fewest points left (on a tie,
 *   the later reset).
 */
import type { RateLimiterRes } from 'rate-limiter-flexible';
import { ServiceError } from '../errors.js';

export interface CountedRule {
  name: string;
  limits: { points: number };
}

export type Outcome<R extends CountedRule = CountedRule> =
  | { rule: R; res: RateLimiterRes; over: boolean }
  | { rule: R; error: unknown };

export interface RateLimitDecision {
  /** RateLimit-Limit / -Remaining / -Reset of the strictest matching rule; empty when none matched. */
  headers: Record<string, string>;
}

export const NO_LIMITS: RateLimitDecision = Object.freeze({ headers: Object.freeze({}) as Record<string, string> });

/** Whole seconds, rounded up; 0 for "no expiry" (-1) or nothing left. */
export const seconds = (ms: number): number => (ms > 0 ? Math.ceil(ms / 1000) : 0);

export function rateLimitHeaders(rule: CountedRule, res: RateLimiterRes): Record<string, string> {
  return {
    'RateLimit-Limit': String(rule.limits.points),
    'RateLimit-Remaining': String(Math.max(0, res.remainingPoints)),
    'RateLimit-Reset': String(seconds(res.msBeforeNext)),
  };
}

/** A 429: which rule refused the request (a metric label; never the counted key). */
export class RateLimitedError extends ServiceError {
  constructor(readonly rule: string, opts: ConstructorParameters<typeof ServiceError>[1]) {
    super('rate_limited', opts);
  }
}

export function decide(outcomes: readonly Outcome[]): RateLimitDecision {
  let over: { rule: CountedRule; res: RateLimiterRes } | undefined;
  let strictest: { rule: CountedRule; res: RateLimiterRes } | undefined;
  let storeError: unknown;
  let failed = false;
  for (const o of outcomes) {
    if ('error' in o) {
      if (!failed) storeError = o.error;
      failed = true;
    } else if (o.over) {
      if (!over || o.res.msBeforeNext > over.res.msBeforeNext) over = o;
    } else if (
      !strictest ||
      o.res.remainingPoints < strictest.res.remainingPoints ||
      (o.res.remainingPoints === strictest.res.remainingPoints && o.res.msBeforeNext > strictest.res.msBeforeNext)
    ) {
      strictest = o;
    }
  }
  if (over) {
    const retryAfter = String(Math.max(1, seconds(over.res.msBeforeNext)));
    throw new RateLimitedError(over.rule.name, {
      headers: {
        'RateLimit-Limit': String(over.rule.limits.points),
        'RateLimit-Remaining': '0',
        'RateLimit-Reset': retryAfter,
        'Retry-After': retryAfter,
      },
      detail: `Rate limit "${over.rule.name}" exceeded; retry after ${retryAfter} s`,
    });
  }
  if (failed) throw new ServiceError('rate_limit_unavailable', { cause: storeError });
  return strictest ? { headers: rateLimitHeaders(strictest.rule, strictest.res) } : NO_LIMITS;
}
