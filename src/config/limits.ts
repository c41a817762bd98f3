/**
 * The one source of the reactor and code-transform limits: the config schema's bounds and
 * defaults, the loader's code-length check, the reactor runtime's registration check and the
 * proxy's code-transform definitions all read them from here.
 */

/** Spec: maximum code length accepted by a Reactor (also for proxy code transforms). */
export const MAX_CODE_LENGTH = 50_000;

export type ReactorLimitField = 'timeout_ms' | 'warm_concurrency' | 'max_concurrency' | 'queue_limit' | 'memory_limit_mb';

export interface LimitRange {
  min: number;
  max: number;
  /** A reactor's default (config schema). */
  default: number;
}

/**
 * Spec: a synchronous invoke never runs above 30 s, and hot concurrency is 1; isolated-vm needs
 * at least 8 MB of memory.
 */
export const REACTOR_LIMITS: Readonly<Record<ReactorLimitField, LimitRange>> = {
  timeout_ms: { min: 1, max: 30_000, default: 30_000 },
  warm_concurrency: { min: 1, max: 64, default: 1 },
  max_concurrency: { min: 1, max: 256, default: 8 },
  queue_limit: { min: 0, max: 10_000, default: 100 },
  memory_limit_mb: { min: 8, max: 2048, default: 128 },
};

/**
 * A proxy code transform has no limits of its own in the config: it runs with a reactor's
 * defaults, and its timeout is its proxy's `timeout_ms`, capped at the reactor maximum.
 */
export function transformLimits(proxyTimeoutMs: number): Record<ReactorLimitField, number> {
  return {
    timeout_ms: Math.min(proxyTimeoutMs, REACTOR_LIMITS.timeout_ms.max),
    warm_concurrency: REACTOR_LIMITS.warm_concurrency.default,
    max_concurrency: REACTOR_LIMITS.max_concurrency.default,
    queue_limit: REACTOR_LIMITS.queue_limit.default,
    memory_limit_mb: REACTOR_LIMITS.memory_limit_mb.default,
  };
}
