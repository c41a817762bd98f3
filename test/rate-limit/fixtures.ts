/**
 * Shared pieces of the rate-limit tests (not a test file: tap runs only *.test.ts).
 * The HTTP-level tests can use these too: `tenantWith(overrides)` gives a tenant whose rules have
 * windows short enough for a test.
 */
import { randomUUID } from 'node:crypto';
import type { Test } from 'tap';
import type { RateRuleOverride } from '../../src/config/schema.js';
import { ServiceError } from '../../src/errors.js';
import { createLogger, type Logger } from '../../src/log.js';
import type { RateLimitConfig, RateLimitDecision, RateLimitSubject, RateLimitTenant, Tier } from '../../src/rate-limit/limiter.js';
import { resolveRules } from '../../src/rate-limit/rules.js';

/** A tenant as the compile step makes it: its tier's rate table with `custom` merged (issue 25). */
export function tenantWith(custom: Record<string, RateRuleOverride> = {}, extra: { id?: string; test?: boolean; tier?: Tier } = {}): RateLimitTenant {
  return { id: extra.id ?? randomUUID(), test: extra.test ?? false, rateTable: resolveRules(extra.tier ?? 'default', custom) };
}

/** The same tenant after a reload that gave it `custom` (a new table, as every reload makes). */
export function reloadedWith(tenant: RateLimitTenant, custom: Record<string, RateRuleOverride>): RateLimitTenant {
  return { ...tenant, rateTable: resolveRules('default', custom) };
}

export function memoryConfig(extra: Partial<RateLimitConfig> = {}): RateLimitConfig {
  return { enabled: true, store: 'memory', key_prefix: 'rl:', on_store_error: 'reject', timeout_ms: 200, ...extra };
}

export interface CapturedLog {
  log: Logger;
  lines: Record<string, unknown>[];
}

export function captureLog(): CapturedLog {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger('info', {
    write(s: string) {
      lines.push(JSON.parse(s) as Record<string, unknown>);
    },
  });
  return { log, lines };
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * How long `run()` takes to settle, in whole milliseconds, and what it settled with (a rejection's
 * reason too). The clock starts before `run` is called, so before any timer the call sets: a
 * check's `timeout_ms` timer is created synchronously inside check(), and timing the promise once
 * made (`timed(check())`) started the clock after it; a run of the suite on a loaded machine then
 * measured 173 ms for a 200 ms timeout. Monotonic (performance.now, as the timers), not Date.now.
 */
export async function timed<T>(run: () => Promise<T>): Promise<[T | unknown, number]> {
  const start = performance.now();
  const r = await run().then((v) => v, (e: unknown) => e);
  return [r, Math.round(performance.now() - start)];
}

/** The failure a service logged ended at its timeout_ms (not an error that came sooner). */
export function loggedTimeout(lines: Record<string, unknown>[], mode: 'reject' | 'allow'): boolean {
  return lines.some((l) => l.event === 'rate_limit_store_error' && l.on_store_error === mode && l.error === 'rate-limit store timed out');
}

/** Resolves to the ServiceError a check threw, or fails the test when it did not throw one. */
export async function rejection(p: Promise<unknown>): Promise<ServiceError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof ServiceError) return e;
    throw e;
  }
  throw new Error('expected the check to throw a ServiceError');
}

/** Asserts a 429 with Retry-After and RateLimit-* headers; returns the error. */
export async function expect429(t: Test, p: Promise<unknown>, limit: number, retryAfter?: number, msg = ''): Promise<ServiceError> {
  const e = await rejection(p);
  t.equal(e.code, 'rate_limited', `${msg} code`);
  t.equal(e.status, 429, `${msg} status`);
  const h = e.headers ?? {};
  t.equal(h['RateLimit-Limit'], String(limit), `${msg} RateLimit-Limit`);
  t.equal(h['RateLimit-Remaining'], '0', `${msg} RateLimit-Remaining`);
  t.match(h['Retry-After'], /^[1-9]\d*$/, `${msg} Retry-After is whole seconds`);
  t.equal(h['RateLimit-Reset'], h['Retry-After'], `${msg} RateLimit-Reset = Retry-After`);
  if (retryAfter !== undefined) t.equal(h['Retry-After'], String(retryAfter), `${msg} Retry-After`);
  return e;
}

export type Subject = RateLimitSubject;

/** A check's outcome, taken without asserting: the decision or the ServiceError it threw. */
export type Outcome = { decision: RateLimitDecision } | { error: ServiceError };

export async function outcome(p: Promise<RateLimitDecision>): Promise<Outcome> {
  try {
    return { decision: await p };
  } catch (e) {
    if (e instanceof ServiceError) return { error: e };
    throw e;
  }
}

/** The outcome as a promise again, for expect429. */
export const replay = (o: Outcome): Promise<unknown> => ('error' in o ? Promise.reject(o.error) : Promise.resolve(o.decision));

/**
 * Runs a timing scenario until its precondition held, at most 5 times (issue 30). Scenarios with
 * short windows need a burst of checks to fit in a short window (or a check to land in the middle of a
 * block); on a loaded machine a stall can break that before anything is asserted. `attempt`
 * decides from the clock alone, before asserting anything, and returns why it could not run; the
 * outcome of the checks never decides a retry, so a limiter that is wrong fails every attempt.
 */
export async function onTime(t: Test, attempt: () => Promise<string | undefined>): Promise<void> {
  for (let i = 1; i <= 5; i++) {
    const missed = await attempt();
    if (missed === undefined) return;
    t.comment(`attempt ${i}: ${missed} (a loaded machine); again with a fresh tenant`);
  }
  t.fail('the timing precondition failed 5 times in a row');
}
