/**
 * The V8 heap's growth, set once at start-up (main.ts), for every process of the service.
 *
 * Under a steady allocation rate V8 lets the old generation grow to up to four times what is live
 * before its next full collection. What is live grows with the open connections (about 4 KB of
 * heap each): with 10,000 idle keep-alive connections and the proxy load beside them, the
 * process's RSS peaked at 310-390 MB. With the growth factor at 2 (`--heap-growing-percent=100`)
 * the same load peaked at 230-260 MB, at the same CPU per request
 * (docs/benchmarks.md).
 *
 * The flag is read by V8 each time it sets the next collection's limit, so setting it at
 * start-up takes effect; a `--heap-growing-percent` on the node command line wins.
 */
import { setFlagsFromString } from 'node:v8';

export const DEFAULT_HEAP_GROWING_PERCENT = 100;

const GIVEN = /^--heap[-_]growing[-_]percent(?:=|$)/;

/** The V8 flags to set, given the node command line's own flags (process.execArgv). */
export function heapFlags(execArgv: readonly string[]): string[] {
  if (execArgv.some((a) => GIVEN.test(a))) return [];
  return [`--heap-growing-percent=${DEFAULT_HEAP_GROWING_PERCENT}`];
}

export function tuneHeap(execArgv: readonly string[] = process.execArgv): void {
  for (const flag of heapFlags(execArgv)) setFlagsFromString(flag);
}
