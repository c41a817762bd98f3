/**
 * Production mode: nothing stops development keys in production otherwise. With
 * `server.mode: production` (or NODE_ENV=production, src/config/load.ts) the service refuses to
 * start, one line per reason, when the master key would be the generated development key, sits
 * inside the store's data directory, or is the development key a development start wrote there
 * (given through TOKENPROXY_MASTER_KEY or as a copy of that file), or when a configured key is one
 * of the development keys published in the README and the default config. It warns, once at
 * start-up, about keys given in plaintext and about `/metrics` on the public listener. Development
 * mode starts as before and says once what production mode would refuse. What needs the store
 * itself (a Redis store's persistence) is checked when the service connects to it, before it writes
 * anything: src/store/redis/durability.ts.
 *
 * Every message names settings by path and files by name; never a key, digest or token.
 */
import { existsSync, realpathSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { sha256 } from './auth/keys.js';
import { adminListener } from './config/admin.js';
import type { LoadedConfig } from './config/load.js';
import { masterKeyId } from './crypto/keyring.js';
import { DEV_KEY_FILE, loadMasterKey, MASTER_KEY_ENV } from './crypto/master-key.js';
import { resolveStorePath } from './store/factory.js';

/**
 * The keys published in config/tokenproxy.yaml, config/compose.yaml and the README examples
 * (test/server/production.test.ts checks that every key those files show is listed here). Compared
 * by SHA-256, so a config that lists one as a digest is caught too.
 */
export const PUBLISHED_DEV_KEYS: readonly string[] = [
  'key_dev_private_change_me_0000000000',
  'key_dev_public_change_me_00000000000',
  'proxy_dev_change_me_000000000000000',
];
const PUBLISHED_DIGESTS = new Set(PUBLISHED_DEV_KEYS.map((k) => sha256(k).toString('hex')));

/** What start-up says in each mode: `refusals` stop a production start; `warnings` are logged. */
export interface ProductionCheck {
  refusals: string[];
  warnings: string[];
}

/** At most this many setting paths in one line; the rest are counted. */
const MAX_PATHS = 4;

function pathList(paths: string[]): string {
  if (paths.length > MAX_PATHS) return `${paths.slice(0, MAX_PATHS).join(', ')} and ${paths.length - MAX_PATHS} more`;
  return paths.length === 1 ? paths[0]! : `${paths.slice(0, -1).join(', ')} and ${paths.at(-1)!}`;
}

/** A path with symbolic links resolved as far as it exists (a key file linked into the data directory counts as inside). */
function real(path: string): string {
  try {
    return realpathSync.native(path);
  } catch {
    try {
      return join(realpathSync.native(dirname(path)), basename(path));
    } catch {
      return path;
    }
  }
}

function isInside(dir: string, file: string): boolean {
  const rel = relative(real(dir), real(file));
  return rel !== '' && rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel);
}

interface KeyEntry {
  at: string;
  /** The plaintext, when the file holds it. */
  plain?: string;
  /** The SHA-256 hex digest, when the file holds only that. */
  digest?: string;
}

function configuredKeys(config: LoadedConfig): KeyEntry[] {
  const keys: KeyEntry[] = [];
  config.tenants.forEach((t, ti) => {
    t.applications.forEach((a, ai) => a.keys.forEach((k, ki) => {
      const at = `tenants[${ti}].applications[${ai}].keys[${ki}]`;
      keys.push(typeof k === 'string' ? { at, plain: k } : { at, digest: k.sha256.toLowerCase() });
    }));
    t.proxies.forEach((p, pi) => {
      if (p.key !== undefined) keys.push({ at: `tenants[${ti}].proxies[${pi}].key`, plain: p.key });
      if (p.key_sha256 !== undefined) keys.push({ at: `tenants[${ti}].proxies[${pi}].key_sha256`, digest: p.key_sha256.toLowerCase() });
    });
  });
  const token = config.metrics.token;
  if (token !== undefined) keys.push(typeof token === 'string' ? { at: 'metrics.token', plain: token } : { at: 'metrics.token', digest: token.sha256.toLowerCase() });
  return keys;
}

/** The master-key refusal, if any: generated (no key given), or a key file inside the store's data directory. */
function masterKeyRefusal(config: LoadedConfig, cwd: string): string | null {
  // An HSM key is never generated nor kept beside the data (start-up fails when it cannot be used).
  if (config.masterKeyFromEnv !== undefined || config.secrets.master_key !== undefined) return null;
  const embedded = config.store.kind === 'embedded';
  const dataDir = embedded ? dirname(resolveStorePath(config.store, cwd)) : null;
  const file = config.secrets.master_key_file;
  if (file === undefined) {
    return `no master key: set ${MASTER_KEY_ENV} or secrets.master_key_file (tokenproxy gen-master-key makes one)` +
      (dataDir ? `; the development key ${join(dataDir, DEV_KEY_FILE)} is for development only` : '');
  }
  if (dataDir && isInside(dataDir, resolve(cwd, file))) {
    return `secrets.master_key_file ${file} is inside the store's data directory ${dataDir}: keep the master key outside it, so a copy of the data never carries its key`;
  }
  return null;
}

/** The key id of a key as loadMasterKey reads it, or null when it cannot be read (start-up reports that itself). */
function keyIdOf(read: () => Buffer): string | null {
  let key: Buffer;
  try {
    key = read();
  } catch {
    return null;
  }
  try {
    return masterKeyId(key);
  } finally {
    key.fill(0);
  }
}

/**
 * The refusal of a given master key that is the development key a development start wrote into
 * the data directory (TOKENPROXY_MASTER_KEY=$(cat data/master.key), or a copy of that file):
 * compared by key id, so the message names the file and never holds key bytes.
 */
function devKeyReuseRefusal(config: LoadedConfig, cwd: string): string | null {
  const file = config.secrets.master_key_file;
  if (config.store.kind !== 'embedded' || (config.masterKeyFromEnv === undefined && file === undefined)) return null;
  const devFile = join(dirname(resolveStorePath(config.store, cwd)), DEV_KEY_FILE);
  if (!existsSync(devFile)) return null;
  const given = keyIdOf(() => loadMasterKey({
    fromEnv: config.masterKeyFromEnv, file: file === undefined ? undefined : resolve(cwd, file), storeKind: 'embedded', dataDir: dirname(devFile), warn: () => {}, createDevKey: false,
  }));
  const dev = keyIdOf(() => loadMasterKey({ storeKind: 'embedded', dataDir: dirname(devFile), warn: () => {}, createDevKey: false }));
  if (given === null || given !== dev) return null;
  const source = config.masterKeyFromEnv !== undefined ? MASTER_KEY_ENV : `secrets.master_key_file ${file}`;
  return `${source} is the development master key of ${devFile} (the same key id): a key written beside the store is not a production secret; ` +
    'move that file out of the data directory (keep the key only where your secrets are kept), or start a new store with a new key (tokenproxy gen-master-key)';
}

/** The refusal of published development keys, if the config holds one (also checked on reload in production mode). */
export function publishedKeyRefusal(config: LoadedConfig): string | null {
  const published = configuredKeys(config).filter((k) => PUBLISHED_DIGESTS.has(k.digest ?? sha256(k.plain!).toString('hex'))).map((k) => k.at);
  if (published.length === 0) return null;
  return `${pathList(published)} ${published.length === 1 ? 'is a development key' : 'are development keys'} published in the README and the default config: ` +
    'make your own (tokenproxy gen-key --type private|public|proxy) and list their digests';
}

/** What production mode refuses and warns about for this config (development mode reports the refusals only). */
export function productionCheck(config: LoadedConfig, cwd: string = process.cwd()): ProductionCheck {
  const refusals: string[] = [];
  const master = masterKeyRefusal(config, cwd) ?? devKeyReuseRefusal(config, cwd);
  if (master) refusals.push(master);
  const published = publishedKeyRefusal(config);
  if (published) refusals.push(published);
  const keys = configuredKeys(config);
  const warnings: string[] = [];
  const plain = keys.filter((k) => k.plain !== undefined).map((k) => k.at);
  if (plain.length > 0) {
    warnings.push(`${pathList(plain)} ${plain.length === 1 ? 'is a key' : 'are keys'} given in plaintext: list the digest instead ({ sha256: "…" }, key_sha256; tokenproxy hash-key prints it), so the config file holds no usable key`);
  }
  if (config.metrics.enabled && adminListener(config) === null) {
    warnings.push(
      `/metrics is served on the public listener (server.port)${config.metrics.token === undefined ? ' without metrics.token' : ''}: ` +
        'set server.admin to serve it on a loopback listener of its own',
    );
  }
  return { refusals, warnings };
}

/** A start-up log line (warn level): logged once, by the single process or a cluster's primary. */
export interface StartupNotice {
  fields: Record<string, unknown>;
  msg: string;
}

/** Development: one line with what production would refuse (none when nothing). Production: one line per warning. */
export function startupNotices(mode: 'development' | 'production', check: ProductionCheck): StartupNotice[] {
  if (mode === 'production') return check.warnings.map((msg) => ({ fields: { mode }, msg }));
  if (check.refusals.length === 0) return [];
  return [{
    fields: { mode, would_refuse: check.refusals },
    msg: 'development mode: production mode (NODE_ENV=production or server.mode: production) would refuse to start with this configuration',
  }];
}
