/**
 * What the reactor runtime reports to the metrics registry (src/metrics/registry.ts implements it). Declared
 * here, by the code that reports, so that it does not import the registry (no upward
 * arrows).
 */
export interface ReactorMetrics {
  /** A call the host answered: `ok` or the failure kind (timeout, out_of_memory, user_error…). */
  call(outcome: string): void;
  hostRestarted(): void;
}
