/**
 * Opens the token store a config names and its key ring, as the service does at start and as
 * `tokenproxy rotate-data-key` does next to a running service. The master key is loaded first: a
 * missing or bad key fails before any connection is made.
 */
import { dirname } from 'node:path';
import type { LoadedConfig } from '../config/load.js';
import type { Logger } from '../log.js';
import { assertStoreExists, createStore, resolveStorePath, StoreMissingError } from '../store/factory.js';
import type { DurabilityPolicy } from '../store/redis/durability.js';
import type { Store, StoreMarker } from '../store/types.js';
import { openIdentified } from '../store/identity.js';
import { groupEntries, KeyRing } from './keyring.js';
import { MasterKeyMismatchError } from './errors.js';
import { RawKek, type KeyEncryptionKey } from './kek.js';
import { loadMasterKey, masterKeyMismatchHint, readPinFile } from './master-key.js';
import { HsmUnavailableError, Pkcs11Kek } from './pkcs11.js';

export interface OpenedRing {
  store: Store;
  ring: KeyRing;
  /** The store's marker (store/identity.ts); null only for a tool's `existing` open of a store that has none. */
  marker: StoreMarker | null;
}

/**
 * `warn`: where the master-key warnings go (default: the logger). `wrap`: applied to the store
 * before the key ring uses it (the service's metrics time every write, the first data key's too).
 * `existing` (the CLI's tools): the store must exist and hold data keys already; nothing
 * is created, neither the store, its directory, the development master key nor a first data key.
 * `durability` (the service): a Redis store's persistence is checked when it connects.
 */
export async function openStoreAndRing(
  config: LoadedConfig, log: Logger, warn = (msg: string) => log.warn(msg), wrap: (store: Store) => Store = (s) => s,
  opts: { existing?: boolean; durability?: DurabilityPolicy } = {},
): Promise<OpenedRing> {
  const existing = opts.existing === true;
  // A missing store is named before the master key is looked for (which may be a development key next to it).
  if (existing) assertStoreExists(config.store);
  const kek = openMasterKey(config, warn, { createDevKey: !existing });
  try {
    return await openRing(config, kek, log, wrap, existing, opts.durability);
  } catch (err) {
    kek.close();
    // the key ring knows the key ids, this knows where the key came from: say what to check.
    if (err instanceof MasterKeyMismatchError) throw new MasterKeyMismatchError(`${err.message}. ${masterKeyHint(config)}`);
    throw err;
  }
}

/**
 * The config's master key: the HSM key of secrets.master_key, else the raw key by the precedence
 * of loadMasterKey (environment > key file > development key). Throws (start-up fails, exit 1)
 * with a message naming what is missing or what the HSM said, never a key or a PIN.
 */
export function openMasterKey(config: LoadedConfig, warn: (msg: string) => void, opts: { createDevKey?: boolean } = {}): KeyEncryptionKey {
  const hsm = config.secrets.master_key;
  if (hsm) {
    let pin: string;
    if (hsm.pin_env !== undefined) {
      if (config.masterKeyPinFromEnv === undefined || config.masterKeyPinFromEnv === '') {
        throw new HsmUnavailableError(`the HSM PIN: the environment variable ${hsm.pin_env} (secrets.master_key.pin_env) is ${config.masterKeyPinFromEnv === undefined ? 'not set' : 'set but empty'}`);
      }
      pin = config.masterKeyPinFromEnv;
    } else {
      pin = readPinFile(hsm.pin_file!, warn);
    }
    return Pkcs11Kek.open(hsm, pin);
  }
  const master = loadMasterKey({
    fromEnv: config.masterKeyFromEnv, file: config.secrets.master_key_file, dataDir: dirname(resolveStorePath(config.store)),
    storeKind: config.store.kind, warn, createDevKey: opts.createDevKey !== false,
  });
  try {
    return new RawKek(master);
  } finally {
    master.fill(0);
  }
}

/** Where this config's master key comes from and which setting names the store: what to check on a mismatch. */
export function masterKeyHint(config: LoadedConfig): string {
  const hsm = config.secrets.master_key;
  if (hsm) {
    return `The master key is the HSM key ${JSON.stringify(hsm.key_label)} on the token ${JSON.stringify(hsm.token_label)} (secrets.master_key): check that it is the key this store was moved to, or that ${storeSetting(config)} names the store this key belongs to`;
  }
  const source = { fromEnv: config.masterKeyFromEnv, file: config.secrets.master_key_file, dataDir: dirname(resolveStorePath(config.store)) };
  return masterKeyMismatchHint(source, storeSetting(config));
}

/** The settings that name the store, for a message (never the URL: it may hold a password). */
export function storeSetting(config: LoadedConfig): string {
  if (config.store.kind === 'embedded') return `store.path (${resolveStorePath(config.store)})`;
  return config.store.kind === 'redis' ? 'store.url and store.key_prefix' : 'store.url';
}

async function openRing(
  config: LoadedConfig, kek: KeyEncryptionKey, log: Logger, wrap: (store: Store) => Store, existing: boolean, durability: DurabilityPolicy | undefined,
): Promise<OpenedRing> {
  const store = wrap(await createStore(config.store, { log, mustExist: existing, durability }));
  try {
    // A lost store is refused before anything is written to it (store/identity.ts); a tool's
    // `existing` open makes no marker and no data key.
    const { marker, ring } = await openIdentified(store, { create: !existing, log }, async () => {
      if (existing && groupEntries(await store.dataKeys.listDataKeys()).keys.size === 0) {
        throw new StoreMissingError(`the ${config.store.kind} store holds no data keys: no tokenproxy service has used it (check ${storeSetting(config)})`);
      }
      // The ring takes the key over only once it opened: a failed open leaves it to openStoreAndRing.
      const opened = await KeyRing.open(kek, store.dataKeys);
      opened.adoptKey();
      return opened;
    });
    return { store, ring, marker };
  } catch (err) {
    await store.close();
    throw err;
  }
}
