/**
 * Times the token store's writes and counts their failures and the tokens they create, for every
 * store kind, without the stores knowing: the write methods of the token and data key ports are
 * wrapped in place (reads are untouched and cost nothing extra; methods added to a port later pass
 * through). The `operation` label is the port method's name.
 */
import { DuplicateTokenError, type DataKeyPort, type Store, type StoredToken, type TokenPort } from '../store/types.js';
import type { StoreMetrics } from './registry.js';

const TOKEN_WRITES = ['insertMany', 'update', 'delete', 'purgeCvc'] as const satisfies ReadonlyArray<keyof TokenPort>;
const DATA_KEY_WRITES = ['addDataKey'] as const satisfies ReadonlyArray<keyof DataKeyPort>;

type Write = (...args: unknown[]) => Promise<unknown>;

export function instrumentStore<S extends Store>(store: S, metrics: StoreMetrics | undefined): S {
  if (!metrics) return store;
  instrument(store.tokens, TOKEN_WRITES, metrics);
  instrument(store.dataKeys, DATA_KEY_WRITES, metrics);
  return store;
}

function instrument(port: object, writes: readonly string[], metrics: StoreMetrics): void {
  const methods = port as Record<string, Write>;
  for (const operation of writes) {
    const original = methods[operation]!.bind(port);
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
}

/** insertMany answers null for each record it wrote (a deduplicated one answers the existing token). */
function countCreated(metrics: StoreMetrics, records: StoredToken[], results: Array<StoredToken | null>): void {
  const byType = new Map<string, number>();
  records.forEach((r, i) => {
    if (results[i] === null) byType.set(r.type, (byType.get(r.type) ?? 0) + 1);
  });
  for (const [type, n] of byType) metrics.created(type, n);
}
