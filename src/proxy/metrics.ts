/**
 * What a proxy reports to the metrics registry (src/metrics/registry.ts implements it). Declared
 * here, by the code that reports, so that it does not import the registry (no upward
 * arrows).
 */
/** One proxy's children, resolved once when the proxy is compiled. */
export interface ProxyMetrics {
  /** The destination answered (its response head arrived); `started` from performance.now(). */
  answered(started: number): void;
  /** Forwarding failed with this catalogue code (destination_unreachable, destination_timeout…), or client_closed. */
  failed(code: string): void;
  /** Card numbers the leak guard found in a body to the destination. */
  leaks(findings: number, blocked: boolean): void;
}
