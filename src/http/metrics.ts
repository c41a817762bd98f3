/**
 * What the request pipeline reports to the metrics registry (src/metrics/registry.ts implements it). Declared
 * here, by the code that reports, so that it does not import the registry (no upward
 * arrows).
 */
/** The route label of a request no route matched (404/405): a fixed value, never the path. */
export const UNMATCHED_ROUTE = 'unmatched';

export interface RequestMetrics {
  /** One answered request: `started` from performance.now() when it arrived (a number: no BigInt per request). */
  request(method: string | undefined, route: string, status: number, started: number): void;
  /** A request refused by a rate-limit rule (the rule's name, never the counted key). */
  rateLimited(rule: string): void;
}
