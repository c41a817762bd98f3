/**
 * The key-encrypting key: what wraps the data keys (and, in HSM mode, the root secret) in the
 * store. Two kinds:
 *
 * - raw: 32 bytes from TOKENPROXY_MASTER_KEY, secrets.master_key_file or the development key
 *   (crypto/master-key.ts). Wraps with AES-256-GCM under a key derived from those bytes, and the
 *   bytes themselves are the root secret the HMAC and cursor keys derive from: the format every
 *   store written before the HSM kind holds, unchanged.
 * - pkcs11: an AES key inside an HSM (crypto/pkcs11.ts). Its bytes never leave the HSM; the
 *   root secret is a random 32 bytes wrapped by it and kept in the store's data key ring under the
 *   reserved kid `root` (crypto/keyring.ts).
 *
 * A wrapped value is `<format>.<kek id>.<…>.<…>`: the id (16 hex digits, public) names the key
 * that wrapped it, so a store opened under another key is refused naming both ids.
 */
import { createCipheriv, createDecipheriv, createHmac, createSecretKey, hkdfSync, randomBytes, type KeyObject } from 'node:crypto';
import { MasterKeyMismatchError } from './errors.js';

export const KEY_BYTES = 32;
const RAW_FORMAT = 'w1';
const IV_BYTES = 12;
const TAG_BYTES = 16;
const HKDF_SALT = Buffer.from('tokenproxy/v1', 'utf8');
const B64URL = /^[A-Za-z0-9_-]+$/;

export interface KeyEncryptionKey {
  readonly kind: 'raw' | 'pkcs11';
  /** Public: in every value this key wraps. */
  readonly id: string;
  /** The raw key's 32 bytes (a copy: the caller clears it), the root secret of a store it made; null for an HSM key. */
  rawRoot(): Buffer | null;
  /** Wraps a 32-byte key stored under `kid` (bound to it where the mechanism authenticates). */
  wrap(kid: string, key: Buffer): string;
  /** The 32 bytes; throws MasterKeyMismatchError when `wrapped` is another key's or does not open. */
  unwrap(kid: string, wrapped: string): Buffer;
  /** Ends the HSM session (clears the raw key's copy); the key wraps nothing after. */
  close(): void;
}

/** The key id a wrapped value names (its second field), or null when it has none. */
export function wrappedBy(wrapped: string): string | null {
  const id = wrapped.split('.')[1];
  return id !== undefined && /^[0-9a-f]{16}$/.test(id) ? id : null;
}

/** A short public identifier of a raw master key (HMAC of a constant): safe to log and to compare. */
export function rawKeyId(master: Buffer | KeyObject): string {
  return createHmac('sha256', master).update('tokenproxy/v1/master-key-id').digest('hex').slice(0, 16);
}

export function mismatch(kid: string, by: string | null, id: string): MasterKeyMismatchError {
  return new MasterKeyMismatchError(by === null
    ? `the master key does not match the store: data key ${kid} is not a wrapped key this version reads`
    : `the master key does not match the store: data key ${kid} was wrapped by master key ${by}, this master key is ${id}`);
}

/** The raw kind: today's `w1.<id>.<iv>.<ciphertext+tag>`, the kid authenticated. */
export class RawKek implements KeyEncryptionKey {
  readonly kind = 'raw' as const;
  readonly id: string;
  readonly #master: Buffer;
  readonly #wrapKey: KeyObject;

  constructor(master: Buffer) {
    if (!Buffer.isBuffer(master) || master.length !== KEY_BYTES) throw new Error(`the master key must be ${KEY_BYTES} bytes`);
    this.#master = Buffer.from(master);
    const key = createSecretKey(this.#master);
    this.id = rawKeyId(key);
    this.#wrapKey = createSecretKey(Buffer.from(hkdfSync('sha256', key, HKDF_SALT, 'tokenproxy/v1/wrap', KEY_BYTES)));
  }

  rawRoot(): Buffer {
    return Buffer.from(this.#master);
  }

  wrap(kid: string, key: Buffer): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.#wrapKey, iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(Buffer.from(`${RAW_FORMAT}.${this.id}.${kid}`, 'utf8'));
    const body = Buffer.concat([cipher.update(key), cipher.final(), cipher.getAuthTag()]);
    return `${RAW_FORMAT}.${this.id}.${iv.toString('base64url')}.${body.toString('base64url')}`;
  }

  unwrap(kid: string, wrapped: string): Buffer {
    const parts = wrapped.split('.');
    if (parts.length !== 4 || parts[0] !== RAW_FORMAT || !B64URL.test(parts[2]) || !B64URL.test(parts[3])) throw mismatch(kid, wrappedBy(wrapped), this.id);
    const [, by, ivText, bodyText] = parts;
    if (by !== this.id) throw mismatch(kid, by, this.id);
    const iv = Buffer.from(ivText, 'base64url');
    const body = Buffer.from(bodyText, 'base64url');
    let plain: Buffer | null = null;
    if (iv.length === IV_BYTES && body.length === KEY_BYTES + TAG_BYTES) {
      const decipher = createDecipheriv('aes-256-gcm', this.#wrapKey, iv, { authTagLength: TAG_BYTES });
      decipher.setAAD(Buffer.from(`${RAW_FORMAT}.${by}.${kid}`, 'utf8'));
      decipher.setAuthTag(body.subarray(KEY_BYTES));
      try {
        plain = Buffer.concat([decipher.update(body.subarray(0, KEY_BYTES)), decipher.final()]);
      } catch {
        plain = null;
      }
    }
    if (!plain) throw new MasterKeyMismatchError(`the master key does not match the store: data key ${kid} cannot be unwrapped (wrong master key or a corrupt key record)`);
    return plain;
  }

  close(): void {
    this.#master.fill(0);
  }
}
