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
import type { RateLimitConfig, RateLimitSubject, RateLimitTenant } from '../../src/rate-limit/limiter.js';

export function tenantWith(custom: Record<string, RateRuleOverride> = {}, extra: Partial<RateLimitTenant> = {}): RateLimitTenant {
  return { id: randomUUID(), test: false, rate_limit_tier: 'default', custom_rate_limits: custom, ...extra };
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
