/**
 * What the token service reports to the metrics registry (src/metrics/registry.ts implements it). Declared
 * here, by the code that reports, so that it does not import the registry (no upward
 * arrows).
 */
export interface VaultMetrics {
  revealed(type: string): void;
}
