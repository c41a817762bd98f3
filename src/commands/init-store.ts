/**
 * `tokenproxy init`: makes the configured store a tokenproxy store, or begins a new, empty vault
 * on a store that was lost (store/identity.ts). A store that serves already is left as it is; a
 * lost store that still holds tokens, audit events or data keys is refused (they are what a
 * restore from backup needs, and init never removes them).
 */
import type { LoadedConfig } from '../config/load.js';
import { createLogger } from '../log.js';

export interface InitIo {
  out(text: string): void;
  err(text: string): void;
}

export async function initStore(config: LoadedConfig, io: InitIo): Promise<number> {
  const [{ createStore }, { findLoss }, { openStoreAndRing }] = await Promise.all([
    import('../store/factory.js'), import('../store/identity.js'), import('../crypto/open.js'),
  ]);
  const fail = (msg: string): number => {
    io.err(`tokenproxy init: ${msg}\n`);
    return 1;
  };
  let began = false;
  try {
    const store = await createStore(config.store, {});
    try {
      const { lost, marker, keys } = await findLoss(store);
      if (!lost && marker) {
        io.out(`the ${config.store.kind} store is a tokenproxy store already (store ${marker.id}, created ${marker.created_at}): nothing to do\n`);
        return 0;
      }
      if (lost) {
        if (keys > 0 || (await store.marker.holdsRecords())) {
          return fail(`${lost.replace(/ Restore the store.*$/, '')}; it still holds tokens, audit events or data keys, which init never removes: restore the store from a backup, or empty it yourself before beginning a new vault there`);
        }
        await store.marker.clearMarker();
        began = true;
      }
    } finally {
      await store.close();
    }
    // As a service start makes a new store: its first data key, then its marker.
    const log = createLogger('warn');
    const opened = await openStoreAndRing(config, log, (msg) => io.err(`tokenproxy init: ${msg}\n`));
    try {
      io.out(`${began ? 'a new, empty vault begins on the lost store' : `the ${config.store.kind} store is ready`}: store ${opened.marker?.id}, data key ${opened.ring.activeKid}\n`);
    } finally {
      await opened.store.close();
    }
    return 0;
  } catch (err) {
    return fail((err as Error).message);
  }
}
