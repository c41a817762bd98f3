/**
 * Opens the token store a config names and its key ring, as the service does at start and as
 * `tokenproxy rotate-data-key` does next to a running service. The master key is loaded first: a
 * missing or bad key fails before any connection is made.
 */
import { dirname, resolve } from 'node:path';
import type { LoadedConfig } from '../config/load.js';
import type { Logger } from '../log.js';
import { createStore } from '../store/factory.js';
import type { TokenStore } from '../store/types.js';
import { KeyRing } from './keyring.js';
import { loadMasterKey } from './master-key.js';

export interface OpenedRing {
  store: TokenStore;
  ring: KeyRing;
}

/**
 * `warn`: where the master-key warnings go (default: the logger). `wrap`: applied to the store
 * before the key ring uses it (the service's metrics time every write, the first data key's too).
 */
export async function openStoreAndRing(
  config: LoadedConfig, log: Logger, warn = (msg: string) => log.warn(msg), wrap: (store: TokenStore) => TokenStore = (s) => s,
): Promise<OpenedRing> {
  const master = loadMasterKey({
    fromEnv: config.masterKeyFromEnv,
    file: config.secrets.master_key_file,
    storeKind: config.store.kind,
    dataDir: dirname(resolve(config.store.path)),
    warn,
  });
  const store = wrap(await createStore(config.store, { log }));
  try {
    const ring = await KeyRing.open(master, store);
    return { store, ring };
  } catch (err) {
    await store.close();
    throw err;
  } finally {
    master.fill(0);
  }
}
