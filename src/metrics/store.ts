/**
 * Times the token store's writes and counts their failures and the tokens they create, for either
 * store kind, without the stores knowing: the write methods of the instance are wrapped in place
 * (reads are untouched and cost nothing extra; methods added to TokenStore later pass through).
 */
import { DuplicateTokenError, type StoredToken, type TokenStore } from '../store/types.js';
import type { StoreMetrics } from './registry.js';

const WRITES = ['insertMany', 'update', 'delete', 'purgeCvc', 'addDataKey'] as const;

type Write = (...args: unknown[]) => Promise<unknown>;

export function instrumentStore<S extends TokenStore>(store: S, metrics: StoreMetrics | undefined): S {
  if (!metrics) return store;
  const methods = store as unknown as Record<string, Write>;
  for (const operation of WRITES) {
    const original = methods[operation]!.bind(store);
    methods[operation] = async (...args: unknown[]) => {
      const started = process.hrtime.bigint();
      let result: unknown;
      try {
        result = await original(...args);
      } catch (err) {
        // A duplicate id is the caller's conflict (409), not a failing store.
        if (!(err instanceof DuplicateTokenError)) metrics.writeFailed(operation);
        throw err;
      }
      metrics.written(operation, started);
      if (operation === 'insertMany') countCreated(metrics, args[0] as StoredToken[], result as Array<StoredToken | null>);
      return result;
    };
  }
  return store;
}

/** insertMany answers null for each record it wrote (a deduplicated one answers the existing token). */
function countCreated(metrics: StoreMetrics, records: StoredToken[], results: Array<StoredToken | null>): void {
  const byType = new Map<string, number>();
  records.forEach((r, i) => {
    if (results[i] === null) byType.set(r.type, (byType.get(r.type) ?? 0) + 1);
  });
  for (const [type, n] of byType) metrics.created(type, n);
}
