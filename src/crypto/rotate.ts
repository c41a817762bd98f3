/**
 * `tokenproxy rotate-data-key`: opens the config's store next to a running service (SQLite in WAL
 * mode lets a second process write the data_keys table; Redis is shared anyway), adds a new data
 * key wrapped by the master key, and closes. The new key is current for every process as soon as
 * it reloads its ring (KeyRing.refresh).
 */
import type { LoadedConfig } from '../config/load.js';
import { createLogger } from '../log.js';
import { openStoreAndRing } from './open.js';

export async function rotateDataKey(config: LoadedConfig, warn: (msg: string) => void): Promise<{ from: string; to: string }> {
  // existing: a missing store (or one no service has used) is an error; nothing is created.
  const { store, ring } = await openStoreAndRing(config, createLogger('silent'), warn, undefined, { existing: true });
  try {
    const from = ring.activeKid;
    const to = await ring.rotate();
    return { from, to };
  } finally {
    await store.close();
    ring.close();
  }
}
