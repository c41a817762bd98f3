/**
 * `tokenproxy hsm init` (a wrap-only AES-256 key on a PKCS#11 token, for SoftHSM2 and
 * development) and `tokenproxy rotate-master-key --to CONFIG` (the store's data keys and root
 * secret wrapped anew by another master key: crypto/rotate-master.ts). Neither prints a key or a PIN.
 */
import { ConfigError, loadConfigFile, type LoadedConfig } from '../config/load.js';
import type { KeyEncryptionKey } from '../crypto/kek.js';
import { KeyRing } from '../crypto/keyring.js';
import { readPinFile } from '../crypto/master-key.js';
import { masterKeyHint, openMasterKey, storeSetting } from '../crypto/open.js';
import { hsmInit, type Pkcs11Mechanism } from '../crypto/pkcs11.js';
import { rewrapRing } from '../crypto/rotate-master.js';
import { createStore, resolveStorePath } from '../store/factory.js';
import type { Store } from '../store/types.js';
import { MECHANISMS } from './master-key-usage.js';
import { decryptSample } from './migrate.js';

type Values = Record<string, string | boolean | undefined>;
type Io = { out(s: string): void; err(s: string): void };

const OK = 0;
const FAILED = 1;
const USAGE = 2;

export async function hsmCommand(values: Values, io: Io): Promise<number> {
  const usage = (msg: string): number => {
    io.err(`tokenproxy hsm: ${msg}; see tokenproxy hsm --help\n`);
    return USAGE;
  };
  if (values.subcommand !== 'init') return usage(values.subcommand === undefined ? 'give a subcommand (init)' : `unknown subcommand "${String(values.subcommand)}"`);
  const flags = ['module', 'token-label', 'key-label', 'pin-file', 'pin-env'].filter((f) => values[f] !== undefined);
  let settings: { module: string; token_label: string; key_label: string; mechanism: Pkcs11Mechanism };
  let pin: string;
  try {
    if (values.config !== undefined) {
      if (flags.length > 0) return usage(`--config takes everything from secrets.master_key: not with --${flags[0]}`);
      let config: LoadedConfig;
      try {
        config = loadConfigFile({ path: values.config as string });
      } catch (err) {
        if (err instanceof ConfigError) {
          io.err(`tokenproxy hsm init: ${err.message}\n`);
          return FAILED;
        }
        throw err;
      }
      const hsm = config.secrets.master_key;
      if (!hsm) return usage(`${values.config} has no secrets.master_key`);
      settings = { ...hsm, mechanism: (values.mechanism as Pkcs11Mechanism | undefined) ?? hsm.mechanism };
      pin = hsm.pin_env !== undefined ? envPin(hsm.pin_env) : readPinFile(hsm.pin_file!, (m) => io.err(`tokenproxy hsm init: ${m}\n`));
    } else {
      for (const f of ['module', 'token-label', 'key-label']) if (typeof values[f] !== 'string' || values[f] === '') return usage(`--${f} is required (or --config)`);
      if ((values['pin-file'] === undefined) === (values['pin-env'] === undefined)) return usage('give the PIN with exactly one of --pin-file and --pin-env');
      settings = {
        module: values.module as string, token_label: values['token-label'] as string, key_label: values['key-label'] as string,
        mechanism: (values.mechanism as Pkcs11Mechanism | undefined) ?? 'auto',
      };
      pin = values['pin-env'] !== undefined ? envPin(values['pin-env'] as string) : readPinFile(values['pin-file'] as string, (m) => io.err(`tokenproxy hsm init: ${m}\n`));
    }
  } catch (err) {
    io.err(`tokenproxy hsm init: ${(err as Error).message}\n`);
    return FAILED;
  }
  if (!MECHANISMS.includes(settings.mechanism)) return usage(`--mechanism must be one of ${MECHANISMS.join(', ')}`);
  try {
    const r = hsmInit(settings, pin);
    io.out(`created the AES-256 key ${JSON.stringify(settings.key_label)} on the token ${JSON.stringify(settings.token_label)}: id ${r.id}, ${r.mechanism}\n`);
    return OK;
  } catch (err) {
    io.err(`tokenproxy hsm init: ${(err as Error).message}\n`);
    return FAILED;
  }
}

/** The PIN from a variable the operator named on the command line. */
function envPin(name: string): string {
  const pin = process.env[name];
  if (pin === undefined || pin === '') throw new Error(`the environment variable ${name} (the HSM PIN) is ${pin === undefined ? 'not set' : 'set but empty'}`);
  return pin;
}

function storeIdentity(c: LoadedConfig): string {
  const s = c.store;
  if (s.kind === 'embedded') return `embedded:${resolveStorePath(s)}`;
  return `${s.kind}:${s.url ?? ''}:${s.kind === 'redis' ? s.key_prefix : ''}`;
}

export async function rotateMasterKeyCommand(values: Values, io: Io): Promise<number> {
  const fail = (msg: string): number => {
    io.err(`tokenproxy rotate-master-key: ${msg}\n`);
    return FAILED;
  };
  if (typeof values.to !== 'string' || values.to === '') {
    io.err('tokenproxy rotate-master-key: --to CONFIG is required (the config naming the new master key); see tokenproxy rotate-master-key --help\n');
    return USAGE;
  }
  let from: LoadedConfig;
  let to: LoadedConfig;
  try {
    from = loadConfigFile({ path: values.config as string | undefined });
    // The new key is the --to config's own (a key file or an HSM key), never the variable that holds the current one.
    const env = { ...process.env };
    delete env.TOKENPROXY_MASTER_KEY;
    to = loadConfigFile({ path: values.to, env });
  } catch (err) {
    return fail(err instanceof ConfigError ? err.message : (err as Error).message);
  }
  if (storeIdentity(from) !== storeIdentity(to)) {
    io.err(`tokenproxy rotate-master-key: --to names another store than the current config (${storeSetting(from)}): the master key is rotated in place; tokenproxy store copy moves a store\n`);
    return USAGE;
  }
  if (!to.secrets.master_key && to.secrets.master_key_file === undefined) {
    io.err('tokenproxy rotate-master-key: the --to config names no new master key: set secrets.master_key (an HSM key) or secrets.master_key_file in it\n');
    return USAGE;
  }
  let fromKey: KeyEncryptionKey;
  try {
    fromKey = openMasterKey(from, (m) => io.err(`tokenproxy rotate-master-key: current key: ${m}\n`), { createDevKey: false });
  } catch (err) {
    return fail(`the current master key: ${(err as Error).message}`);
  }
  let toKey: KeyEncryptionKey;
  try {
    toKey = openMasterKey(to, (m) => io.err(`tokenproxy rotate-master-key: new key: ${m}\n`), { createDevKey: false });
  } catch (err) {
    fromKey.close();
    return fail(`the new master key: ${(err as Error).message}`);
  }
  let store: Store | null = null;
  try {
    store = await createStore(from.store, { mustExist: true });
    io.out(`wrapping the data keys and the root secret of the ${from.store.kind} store by master key ${toKey.id} (now ${fromKey.id})\n`);
    let result;
    try {
      result = await rewrapRing(fromKey, toKey, store.dataKeys, (p) => io.out(`  ${p.kid}: ${p.written ? 'wrapped' : 'already wrapped (an earlier run)'}\n`));
    } catch (err) {
      const hint = (err as Error).name === 'MasterKeyMismatchError' ? ` ${masterKeyHint(from)}` : '';
      return fail(`${(err as Error).message}${hint}; nothing that was written needs undoing: run the command again once this is fixed`);
    }
    // As the service on --to will open it: every key under the new master key, and tokens that decrypt.
    const ring = await KeyRing.open(toKey, store.dataKeys);
    const sample = await decryptSample(store, ring, to);
    if (!sample.ok) return fail(`checking under the new master key: ${sample.reason}`);
    io.out(
      `done: ${result.keys} data key(s)${result.root ? ' and the root secret' : ''} are wrapped by master key ${toKey.id} (${result.written} written now); ` +
        `${sample.count} token(s) (the newest of each tenant) decrypt under it. Start the service with ${values.to}. ` +
        `The store keeps the entries of master key ${fromKey.id}: it still opens this store and its backups\n`,
    );
    return OK;
  } catch (err) {
    return fail(`${(err as Error).message} (run the command again: it goes on where it stopped)`);
  } finally {
    await store?.close();
    fromKey.close();
    toKey.close();
  }
}
