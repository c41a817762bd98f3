/**
 * Shared pieces of the reactor runtime tests: a logger whose output is kept in memory (so tests
 * assert on the bytes the service would log), and reactor definitions with small limits.
 */
import { createLogger, type Logger } from '../../src/log.js';
import { ServiceError } from '../../src/errors.js';
import type { ServedBy } from '../../src/reactors/protocol.js';
import type { ReactorDefinition, ReactorRuntime } from '../../src/reactors/runtime.js';

export interface CapturedLog {
  log: Logger;
  /** Every line written so far, parsed. */
  entries(): Array<Record<string, unknown>>;
  /** The raw bytes written so far. */
  text(): string;
}

export function captureLog(level = 'debug'): CapturedLog {
  const chunks: string[] = [];
  const log = createLogger(level, { write: (s: string) => void chunks.push(s) });
  return {
    log,
    entries: () => chunks.join('').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>),
    text: () => chunks.join(''),
  };
}

/** A reactor with test-sized limits; `code` is the module source. */
export function reactor(key: string, code: string, over: Partial<ReactorDefinition> = {}): ReactorDefinition {
  return {
    key,
    name: key.split('/').pop() ?? key,
    code,
    configuration: {},
    timeout_ms: 2000,
    warm_concurrency: 1,
    max_concurrency: 4,
    queue_limit: 16,
    memory_limit_mb: 16,
    ...over,
  };
}

/** A reactor body: `module.exports = async function (req) { <body> }`. */
export function fn(body: string): string {
  return `module.exports = async function (req) {\n${body}\n};\n`;
}

/** Awaits a promise expected to reject with a ServiceError and returns that error. */
export async function serviceError(p: Promise<unknown>): Promise<ServiceError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof ServiceError) return err;
    throw err;
  }
  throw new Error('expected a ServiceError, but the call succeeded');
}

/**
 * Invokes a reactor and reports which isolate served the call (its serial in the host, and the
 * call's number on it). Reactor code cannot count its own calls any more: nothing it keeps
 * survives a call (issue 23).
 */
export async function invokeServed(runtime: ReactorRuntime, key: string, args: unknown): Promise<{ value: unknown; served: ServedBy }> {
  let served: ServedBy | undefined;
  const value = await runtime.invoke(key, { args }, { served: (s) => (served = s) });
  if (!served) throw new Error(`no isolate reported for a call to ${key}`);
  return { value, served };
}
