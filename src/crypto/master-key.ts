/**
 * The master key: 32 bytes that wrap the data keys and derive the HMAC keys. It comes from
 * TOKENPROXY_MASTER_KEY, else from secrets.master_key_file, else (embedded store only) from a
 * development key file created next to the database. Nothing here ever puts key bytes in a message.
 */
import { closeSync, fsyncSync, linkSync, mkdirSync, openSync, readFileSync, statSync, unlinkSync, writeSync, chmodSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';

export const MASTER_KEY_BYTES = 32;
export const MASTER_KEY_ENV = 'TOKENPROXY_MASTER_KEY';
export const DEV_KEY_FILE = 'master.key';

const GENERATE_HINT = 'generate one with: openssl rand -base64 32';

export interface LoadMasterKeyOptions {
  /** The value of TOKENPROXY_MASTER_KEY (config/ reads the environment, not this module). */
  fromEnv?: string;
  /** secrets.master_key_file */
  file?: string;
  storeKind: 'embedded' | 'redis' | 'postgres';
  /** Where the development key lives (embedded store only), normally the database's directory. */
  dataDir: string;
  warn: (msg: string) => void;
  /** false: a missing development key is an error, not created (the CLI's tools read a store). */
  createDevKey?: boolean;
}

/** Standard or URL-safe base64, padding optional; Buffer.from alone silently skips bad characters. */
function decodeBase64Key(text: string, source: string): Buffer {
  const trimmed = text.trim();
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(trimmed)) {
    throw new Error(`${source} is not valid base64; it must be the base64 of exactly ${MASTER_KEY_BYTES} bytes (${GENERATE_HINT})`);
  }
  const key = Buffer.from(trimmed, 'base64');
  if (key.length !== MASTER_KEY_BYTES) {
    throw new Error(`${source} must be the base64 of exactly ${MASTER_KEY_BYTES} bytes, it decodes to ${key.length} bytes (${GENERATE_HINT})`);
  }
  return key;
}

/** An all-zero key is a placeholder someone forgot to replace, not a secret. */
function rejectPlaceholder(key: Buffer, source: string): Buffer {
  if (key.every((b) => b === 0)) throw new Error(`${source} is all zero bytes; use a random key (${GENERATE_HINT})`);
  return key;
}

function errnoCode(err: unknown): string {
  if (err instanceof Error && 'code' in err && typeof err.code === 'string') return err.code;
  return 'error';
}

/** Group/other permission bits on a key file: warn (Kubernetes secret mounts are often 0644). */
function checkMode(path: string, mode: number, warn: (msg: string) => void): void {
  if (process.platform === 'win32') return;
  if ((mode & 0o077) !== 0) {
    warn(`master key file ${path} is accessible by group or others (mode ${(mode & 0o777).toString(8)}); chmod 600 it`);
  }
}

function readKeyFile(path: string, source: string, warn: (msg: string) => void): Buffer {
  let bytes: Buffer;
  try {
    const st = statSync(path);
    if (!st.isFile()) throw Object.assign(new Error('not a regular file'), { code: 'not a regular file' });
    checkMode(path, st.mode, warn);
    bytes = readFileSync(path);
  } catch (err) {
    throw new Error(`cannot read ${source} ${path} (${errnoCode(err)})`);
  }
  // 32 raw bytes, or base64 text (44 characters, so the two forms never collide).
  if (bytes.length === MASTER_KEY_BYTES) return bytes;
  return decodeBase64Key(bytes.toString('latin1'), `${source} ${path}`);
}

/**
 * Creates the development key atomically: written and fsynced under a temporary name, then
 * hard-linked into place (link fails if another process got there first, and a crash never
 * leaves a half-written key file behind).
 */
function createDevKey(path: string): void {
  const tmp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  const fd = openSync(tmp, 'wx', 0o600);
  try {
    writeSync(fd, `${randomBytes(MASTER_KEY_BYTES).toString('base64')}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  try {
    chmodSync(tmp, 0o600);
    linkSync(tmp, path);
  } catch (err) {
    if (errnoCode(err) !== 'EEXIST') throw err;
  } finally {
    unlinkSync(tmp);
  }
}

function devKey(dataDir: string, warn: (msg: string) => void, create: boolean): Buffer {
  const path = join(dataDir, DEV_KEY_FILE);
  let created = false;
  if (!create) {
    try {
      statSync(path);
    } catch (err) {
      throw new Error(`no master key: ${MASTER_KEY_ENV} and secrets.master_key_file are not set, and there is no development master key ${path} (${errnoCode(err)})`);
    }
  }
  try {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    try {
      statSync(path);
    } catch (err) {
      if (errnoCode(err) !== 'ENOENT') throw err;
      createDevKey(path);
      created = true;
    }
  } catch (err) {
    throw new Error(`cannot create the development master key ${path} (${errnoCode(err)})`);
  }
  const key = readKeyFile(path, 'development master key file', () => {});
  warn(
    `${created ? 'created' : 'using'} a DEVELOPMENT master key at ${path}: tokens are only as safe as that file. ` +
      `For production set ${MASTER_KEY_ENV} or secrets.master_key_file.`,
  );
  return key;
}

/** The 32-byte master key, by the precedence environment > key file > development key. */
export function loadMasterKey(opts: LoadMasterKeyOptions): Buffer {
  if (opts.fromEnv !== undefined) {
    // Set but empty is a broken deployment (a missing secret), never a reason to fall back.
    if (opts.fromEnv.trim() === '') throw new Error(`${MASTER_KEY_ENV} is set but empty (${GENERATE_HINT})`);
    return rejectPlaceholder(decodeBase64Key(opts.fromEnv, MASTER_KEY_ENV), MASTER_KEY_ENV);
  }
  if (opts.file !== undefined) {
    return rejectPlaceholder(readKeyFile(opts.file, 'master key file', opts.warn), `master key file ${opts.file}`);
  }
  if (opts.storeKind !== 'embedded') {
    // A shared store (Redis, PostgreSQL) has no local directory for a development key.
    throw new Error(
      `a master key is required with the ${opts.storeKind === 'redis' ? 'Redis' : 'PostgreSQL'} store (every instance must share it): set ${MASTER_KEY_ENV} or secrets.master_key_file (${GENERATE_HINT})`,
    );
  }
  return devKey(opts.dataDir, opts.warn, opts.createDevKey !== false);
}

/**
 * What to check when the store's data keys were wrapped by another master key: where
 * this key was read from (by the precedence of loadMasterKey) and which setting names the store.
 * A common first-hour case: the service ran once on the development key, then TOKENPROXY_MASTER_KEY
 * was set. Names sources and settings only, never a key or a URL (it may hold a password).
 */
export function masterKeyMismatchHint(opts: Pick<LoadMasterKeyOptions, 'fromEnv' | 'file' | 'dataDir'>, storeSetting: string): string {
  const source = opts.fromEnv !== undefined
    ? `${MASTER_KEY_ENV} (which takes precedence over secrets.master_key_file and the development key)`
    : opts.file !== undefined
      ? `the file ${opts.file} (secrets.master_key_file)`
      : `the development master key ${join(opts.dataDir, DEV_KEY_FILE)} (neither ${MASTER_KEY_ENV} nor secrets.master_key_file is set)`;
  return `The master key was read from ${source}: check that it holds the key this store was first used with, or that ${storeSetting} names the store this key belongs to`;
}

/** The HSM PIN from secrets.master_key.pin_file: its content, trailing newline dropped; the message names the file, never what it holds. */
export function readPinFile(path: string, warn: (msg: string) => void): string {
  let text: string;
  try {
    const st = statSync(path);
    if (!st.isFile()) throw Object.assign(new Error('not a regular file'), { code: 'not a regular file' });
    if (process.platform !== 'win32' && (st.mode & 0o077) !== 0) {
      warn(`HSM PIN file ${path} is accessible by group or others (mode ${(st.mode & 0o777).toString(8)}); chmod 600 it`);
    }
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`cannot read the HSM PIN file ${path} (secrets.master_key.pin_file: ${errnoCode(err)})`);
  }
  const pin = text.replace(/\r?\n$/, '');
  if (pin === '') throw new Error(`the HSM PIN file ${path} (secrets.master_key.pin_file) is empty`);
  return pin;
}
