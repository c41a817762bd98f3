/**
 * The key ring: envelope encryption and keyed digests.
 *
 * - Data keys (32 random bytes) seal values with AES-256-GCM. Each is stored in the token store
 *   wrapped by the master key (crypto/kek.ts: a raw key, or an AES key in an HSM), so the store
 *   never holds a usable key.
 * - Sealed values are `v1.<kid>.<iv>.<ciphertext+tag>` (base64url). The header and the caller's
 *   AAD (the vault passes `tenantId:tokenId`) are authenticated, so a ciphertext cannot be moved
 *   to another token, tenant or key id. IVs are random 96-bit values: rotate well before 2^32
 *   seals per data key (NIST SP 800-38D §8.3).
 * - Fingerprints and search-index hashes are HMAC-SHA256 under per-tenant keys derived from the
 *   root secret with HKDF (RFC 5869), one `info` per purpose and tenant. They do not depend on the
 *   data keys, so rotation never changes them.
 * - The root secret is the raw master key's 32 bytes (every store made with TOKENPROXY_MASTER_KEY,
 *   a key file or the development key), or 32 random bytes wrapped by the master key and kept in
 *   the ring under the reserved kid `root` (a store made with an HSM key). Moving a store to
 *   another master key wraps the same root secret anew, so fingerprints, search indexes, cursors
 *   and audit anchors stay as they were.
 * - Ring entries are append-only (the store keeps the first write of a kid): a data key wrapped
 *   anew under another master key (`tokenproxy rotate-master-key`) is a second entry `<kid>@<key
 *   id>`. A ring takes, for each kid, the entry its master key wrapped.
 * - Page cursors are sealed (AES-256-GCM) under per-tenant keys derived the same way, with the
 *   query they page authenticated: opaque to clients, and a forged cursor, another
 *   tenant's or another query's does not open.
 */
import { createCipheriv, createDecipheriv, createHmac, createSecretKey, hkdfSync, randomBytes, randomFillSync, type KeyObject } from 'node:crypto';
import { anchorSigner, type AuditAnchorSigner } from '../crypto/audit-anchor.js';
import type { DataKeyPort, WrappedDataKey } from '../store/types.js';
import { MasterKeyMismatchError, SealedValueError, UnknownKeyError } from './errors.js';
import { RawKek, rawKeyId, wrappedBy, type KeyEncryptionKey } from './kek.js';

const SEAL_VERSION = 'v1';
const KEY_BYTES = 32;
/** The ring entry holding the wrapped root secret (HSM mode); never a data key's kid (k1, k2, …). */
export const ROOT_KID = 'root';
const IV_BYTES = 12;
const TAG_BYTES = 16;
const HKDF_SALT = Buffer.from('tokenproxy/v1', 'utf8');
const KID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const B64URL = /^[A-Za-z0-9_-]+$/;
/** Tenants come from config, so this bounds memory only against misuse. */
const MAX_CACHED_TENANT_KEYS = 10_000;

type Purpose = 'fingerprint' | 'search-index' | 'cursor';
const CURSOR_VERSION = 'c1';
/** `c1.<iv>.<ciphertext+tag>`: the store's cursor is a few bytes, so this bounds what is tried. */
const SEALED_CURSOR = /^c1\.([A-Za-z0-9_-]{16})\.([A-Za-z0-9_-]{22,200})$/;

/** A short public identifier of a raw master key (HMAC of a constant): safe to log and to compare. */
export function masterKeyId(master: Buffer | KeyObject): string {
  return rawKeyId(master);
}

/** The data key an entry holds: `k3` for `k3` and for `k3@<key id>`, its copy under another master key. */
export function baseKid(kid: string): string {
  const at = kid.indexOf('@');
  return at < 0 ? kid : kid.slice(0, at);
}

/** The kid of a key's copy wrapped by another master key. */
export function copyKid(base: string, kekId: string): string {
  return `${base}@${kekId}`;
}

/** The ring's entries by the key they hold, in the order each first appears (oldest first); the root apart. */
export function groupEntries(entries: WrappedDataKey[]): { root: WrappedDataKey[]; keys: Map<string, WrappedDataKey[]> } {
  const root: WrappedDataKey[] = [];
  const keys = new Map<string, WrappedDataKey[]>();
  for (const e of entries) {
    const base = baseKid(e.kid);
    if (base === ROOT_KID) {
      root.push(e);
      continue;
    }
    const list = keys.get(base);
    if (list) list.push(e);
    else keys.set(base, [e]);
  }
  return { root, keys };
}

/**
 * The first kid (the root's included) with no entry wrapped by the master key `kekId`, or null
 * when every one has one: the tools check this before they anchor or convert anything.
 */
export function missingUnder(entries: WrappedDataKey[], kekId: string, rawKey: boolean): { kid: string; by: string | null } | null {
  const { root, keys } = groupEntries(entries);
  // A raw key with no root entry of its own is the root itself (a store made with it).
  if (root.length > 0 && !rawKey && !root.some((e) => wrappedBy(e.wrapped) === kekId)) return { kid: ROOT_KID, by: wrappedBy(root[0]!.wrapped) };
  for (const [kid, list] of keys) {
    if (!list.some((e) => wrappedBy(e.wrapped) === kekId)) return { kid, by: wrappedBy(list[0]!.wrapped) };
  }
  return null;
}

/**
 * The root secret of a store under this master key (a copy: the caller clears it). `create`: on
 * an empty store an HSM key makes one (two instances starting at once keep the first written).
 * Throws MasterKeyMismatchError when the store's root (or its data keys) belong to another key.
 */
export async function vaultRoot(kek: KeyEncryptionKey, store: DataKeyPort, opts: { create?: boolean; entries?: WrappedDataKey[] } = {}): Promise<Buffer> {
  let entries = opts.entries ?? (await store.listDataKeys());
  const { root, keys } = groupEntries(entries);
  const mine = root.find((e) => wrappedBy(e.wrapped) === kek.id);
  if (mine) return kek.unwrap(ROOT_KID, mine.wrapped);
  const raw = kek.rawRoot();
  if (raw) return raw;
  if (root.length > 0) {
    throw new MasterKeyMismatchError(`the master key does not match the store: its root secret was wrapped by master key ${wrappedBy(root[0]!.wrapped) ?? '(unknown)'}, this master key is ${kek.id}`);
  }
  if (keys.size > 0) {
    const first = [...keys.values()][0]![0]!;
    throw new MasterKeyMismatchError(
      `the master key does not match the store: its data keys were wrapped by master key ${wrappedBy(first.wrapped) ?? '(unknown)'} (a raw key: TOKENPROXY_MASTER_KEY, ` +
        `secrets.master_key_file or the development key), this HSM key is ${kek.id}; tokenproxy rotate-master-key moves a store to the HSM`,
    );
  }
  if (opts.create === false) throw new Error('the store holds no data keys');
  const fresh = randomBytes(KEY_BYTES);
  try {
    entries = await store.addDataKey({ kid: ROOT_KID, wrapped: kek.wrap(ROOT_KID, fresh), created_at: new Date().toISOString() });
  } finally {
    fresh.fill(0);
  }
  const written = groupEntries(entries).root.find((e) => wrappedBy(e.wrapped) === kek.id);
  if (!written) throw new MasterKeyMismatchError(`the master key does not match the store: another master key wrote its root secret meanwhile (this master key is ${kek.id})`);
  return kek.unwrap(ROOT_KID, written.wrapped);
}

function derive(master: KeyObject, info: string): KeyObject {
  if (Buffer.byteLength(info) > 1024) throw new Error('key derivation context is too long (tenant id over 1000 bytes?)');
  return createSecretKey(Buffer.from(hkdfSync('sha256', master, HKDF_SALT, info, KEY_BYTES)));
}

/**
 * Random IVs drawn from a pool refilled by one randomFillSync per 256 IVs (a CPU profile of the
 * tokenizing proxy showed one randomBytes call per seal at 3% of the main thread). Every pool byte
 * is used once, so the IVs are exactly as random as one randomBytes(12) each; an IV is used
 * within gcmSeal before the pool can be refilled.
 */
const ivPool = Buffer.alloc(IV_BYTES * 256);
let ivOffset = ivPool.length;

function freshIv(): Buffer {
  if (ivOffset === ivPool.length) {
    randomFillSync(ivPool);
    ivOffset = 0;
  }
  const iv = ivPool.subarray(ivOffset, ivOffset + IV_BYTES);
  ivOffset += IV_BYTES;
  return iv;
}

/** A string plaintext is encrypted as its UTF-8 bytes without a Buffer copy of it first. */
function gcmSeal(key: KeyObject, plaintext: Buffer | string, aad: Buffer): string {
  const iv = freshIv();
  const cipher = createCipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(aad);
  const ct = typeof plaintext === 'string' ? cipher.update(plaintext, 'utf8') : cipher.update(plaintext);
  // GCM's final() yields no bytes; it only computes the tag.
  cipher.final();
  const body = Buffer.concat([ct, cipher.getAuthTag()]);
  return `${iv.toString('base64url')}.${body.toString('base64url')}`;
}

/** The IV and ciphertext+tag of a sealed string, or null when they are not well-formed. */
function gcmParts(ivText: string, bodyText: string): { iv: Buffer; body: Buffer } | null {
  if (!B64URL.test(ivText) || !B64URL.test(bodyText)) return null;
  const iv = Buffer.from(ivText, 'base64url');
  const body = Buffer.from(bodyText, 'base64url');
  return iv.length === IV_BYTES && body.length >= TAG_BYTES ? { iv, body } : null;
}

/** null when authentication fails. */
function gcmOpen(key: KeyObject, { iv, body }: { iv: Buffer; body: Buffer }, aad: Buffer): Buffer | null {
  const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
  decipher.setAAD(aad);
  decipher.setAuthTag(body.subarray(body.length - TAG_BYTES));
  try {
    return Buffer.concat([decipher.update(body.subarray(0, body.length - TAG_BYTES)), decipher.final()]);
  } catch {
    return null;
  }
}

/** Types are few (token, card): their prefixes are built once. */
const typePrefixes = new Map<string, Buffer>();

/** The fingerprint's type, length-prefixed, so ("a", "bc") and ("ab", "c") never collide. */
function typePrefix(type: string): Buffer {
  let prefix = typePrefixes.get(type);
  if (!prefix) {
    const typeBytes = Buffer.from(type, 'utf8');
    prefix = Buffer.alloc(4 + typeBytes.length);
    prefix.writeUInt32BE(typeBytes.length);
    typeBytes.copy(prefix, 4);
    if (typePrefixes.size < 64) typePrefixes.set(type, prefix);
  }
  return prefix;
}

function sealAad(kid: string, aad: string): Buffer {
  return Buffer.from(`${SEAL_VERSION}.${kid}.${aad}`, 'utf8');
}

/** Kids are k1, k2, …: two instances creating "the next key" at once pick the same kid, so the
 * store keeps one of them (addDataKey ignores a second kid) and both converge on it. */
function nextKid(ring: WrappedDataKey[]): string {
  const kids = groupEntries(ring).keys;
  let max = 0;
  for (const kid of kids.keys()) {
    const m = /^k(\d{1,9})$/.exec(kid);
    if (m) max = Math.max(max, Number(m[1]));
  }
  return `k${Math.max(max, kids.size) + 1}`;
}

export class KeyRing {
  readonly #store: DataKeyPort;
  readonly #kek: KeyEncryptionKey;
  /** Closed with the ring: a raw key given as bytes (the ring made its key object), or one handed over (adoptKey). */
  #ownsKek: boolean;
  readonly #root: KeyObject;
  readonly #masterId: string;
  #keys = new Map<string, KeyObject>();
  /** Unwrapped keys by kid and wrapped value: a refresh unwraps (an HSM call) only a key it has not seen. */
  #unwrapped = new Map<string, KeyObject>();
  #active = '';
  #tenantKeys = new Map<string, KeyObject>();
  #refreshing: Promise<void> | null = null;
  /** The wrapped keys the ring was last loaded from: a refresh that reads the same skips the unwrap. */
  #loadedFrom = '';

  private constructor(kek: KeyEncryptionKey, ownsKek: boolean, root: Buffer, store: DataKeyPort) {
    this.#store = store;
    this.#kek = kek;
    this.#ownsKek = ownsKek;
    this.#root = createSecretKey(root);
    this.#masterId = kek.id;
  }

  /** Loads (or, on an empty store, creates) the data keys. Throws MasterKeyMismatchError when
   * the store's keys were wrapped by another master key. `master`: a raw key's 32 bytes, or a
   * key-encrypting key (crypto/kek.ts), which stays the caller's to close unless it hands it
   * to the ring (adoptKey). */
  static async open(master: Buffer | KeyEncryptionKey, store: DataKeyPort): Promise<KeyRing> {
    if (Buffer.isBuffer(master) && master.length !== KEY_BYTES) throw new Error(`the master key must be ${KEY_BYTES} bytes`);
    const owns = Buffer.isBuffer(master);
    const kek = Buffer.isBuffer(master) ? new RawKek(master) : master;
    try {
      let wrapped = await store.listDataKeys();
      const { keys } = groupEntries(wrapped);
      // The data keys are checked before the root: a store of another master key is named by its data key.
      if (keys.size > 0) {
        const missing = missingUnder(wrapped, kek.id, kek.kind === 'raw');
        // An HSM key on a store that never had a root entry (one made with a raw key): vaultRoot says what to run.
        if (missing && kek.kind !== 'raw' && groupEntries(wrapped).root.length === 0) await vaultRoot(kek, store, { entries: wrapped, create: false });
        if (missing && missing.kid !== ROOT_KID) kek.unwrap(missing.kid, [...keys.get(missing.kid)!][0]!.wrapped);
      }
      const root = await vaultRoot(kek, store, { entries: wrapped });
      let ring: KeyRing;
      try {
        ring = new KeyRing(kek, owns, root, store);
      } finally {
        root.fill(0);
      }
      if (groupEntries(wrapped).keys.size === 0) {
        wrapped = await store.addDataKey(ring.#wrap(nextKid(await store.listDataKeys())));
      }
      ring.#load(wrapped);
      return ring;
    } catch (err) {
      if (owns) kek.close();
      throw err;
    }
  }

  /** The ring closes the master key it was opened with (an HSM session) when it closes. */
  adoptKey(): void {
    this.#ownsKek = true;
  }

  /** Releases what the ring holds of the master key (an HSM session is the caller's when it passed the key). */
  close(): void {
    if (this.#ownsKek) this.#kek.close();
  }

  get activeKid(): string {
    return this.#active;
  }

  get kids(): string[] {
    return [...this.#keys.keys()];
  }

  get masterKeyId(): string {
    return this.#masterId;
  }

  /** The kid a sealed value names, or null when it is not a sealed value. */
  static kidOf(sealed: string): string | null {
    const parts = sealed.split('.');
    return parts.length === 4 && parts[0] === SEAL_VERSION && KID_PATTERN.test(parts[1]) ? parts[1] : null;
  }

  seal(plaintext: string, aad: string): string {
    const kid = this.#active;
    const key = this.#keys.get(kid);
    if (!key) throw new Error('the key ring has no active data key');
    return `${SEAL_VERSION}.${kid}.${gcmSeal(key, plaintext, sealAad(kid, aad))}`;
  }

  /** Throws SealedValueError (malformed, tampered, wrong AAD) or UnknownKeyError. */
  unseal(sealed: string, aad: string): string {
    const parts = sealed.split('.');
    if (parts.length !== 4 || parts[0] !== SEAL_VERSION || !KID_PATTERN.test(parts[1])) {
      throw new SealedValueError('malformed');
    }
    const [, kid, iv, body] = parts;
    const key = this.#keys.get(kid);
    if (!key) throw new UnknownKeyError(kid);
    const gcm = gcmParts(iv, body);
    if (!gcm) throw new SealedValueError('malformed');
    const plain = gcmOpen(key, gcm, sealAad(kid, aad));
    if (!plain) throw new SealedValueError('authentication_failed');
    return plain.toString('utf8');
  }

  /** unseal, but first reloads the ring once when the value names a key another instance added. */
  async unsealOrRefresh(sealed: string, aad: string): Promise<string> {
    try {
      return this.unseal(sealed, aad);
    } catch (err) {
      if (!(err instanceof UnknownKeyError)) throw err;
      await this.refresh();
      return this.unseal(sealed, aad);
    }
  }

  /** Reloads the data keys from the store (concurrent calls share one load). */
  async refresh(): Promise<void> {
    if (!this.#refreshing) {
      this.#refreshing = this.#store
        .listDataKeys()
        .then((wrapped) => this.#load(wrapped))
        .finally(() => {
          this.#refreshing = null;
        });
    }
    return this.#refreshing;
  }

  /** Adds a new data key and makes it the active one; returns its kid. Old keys keep opening
   * what they sealed. */
  async rotate(): Promise<string> {
    const current = await this.#store.listDataKeys();
    const missing = missingUnder(current, this.#masterId, this.#kek.kind === 'raw');
    if (missing && missing.kid !== ROOT_KID) {
      // A new key under this master key beside keys only another one opens: finish the move first.
      throw new MasterKeyMismatchError(`data key ${missing.kid} is wrapped by master key ${missing.by ?? '(unknown)'} only, not by this master key ${this.#masterId}: finish tokenproxy rotate-master-key first`);
    }
    this.#load(await this.#store.addDataKey(this.#wrap(nextKid(current))));
    return this.#active;
  }

  /** Keyed digest of a token's fingerprint value, unique per tenant and type (hex). */
  fingerprint(tenantId: string, type: string, value: string): string {
    return createHmac('sha256', this.#tenantKey('fingerprint', tenantId)).update(typePrefix(type)).update(value, 'utf8').digest('hex');
  }

  /** Keyed digest of an evaluated search index, per tenant (hex). */
  indexHash(tenantId: string, value: string): string {
    return createHmac('sha256', this.#tenantKey('search-index', tenantId)).update(value, 'utf8').digest('hex');
  }

  /**
   * Seals a store's page cursor for a client, under the tenant's cursor key; `context` (the query
   * it pages) is authenticated, not stored. Random IVs: the same position gives a new string.
   */
  sealCursor(tenantId: string, payload: string, context: string): string {
    return `${CURSOR_VERSION}.${gcmSeal(this.#tenantKey('cursor', tenantId), payload, Buffer.from(context, 'utf8'))}`;
  }

  /** The payload of a cursor sealed for this tenant and context, else null (forged, altered, another tenant's or query's). */
  openCursor(tenantId: string, cursor: string, context: string): string | null {
    const m = SEALED_CURSOR.exec(cursor);
    const gcm = m && gcmParts(m[1]!, m[2]!);
    if (!gcm) return null;
    return gcmOpen(this.#tenantKey('cursor', tenantId), gcm, Buffer.from(context, 'utf8'))?.toString('utf8') ?? null;
  }

  /** Anchors audit chain heads under this master key (crypto/audit-anchor.ts). */
  auditAnchors(): AuditAnchorSigner {
    return anchorSigner(this.#root);
  }

  toJSON(): { activeKid: string; kids: string[]; masterKeyId: string } {
    return { activeKid: this.#active, kids: this.kids, masterKeyId: this.#masterId };
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return `KeyRing ${JSON.stringify(this.toJSON())}`;
  }

  #tenantKey(purpose: Purpose, tenantId: string): KeyObject {
    const cacheKey = `${purpose}\0${tenantId}`;
    let key = this.#tenantKeys.get(cacheKey);
    if (!key) {
      if (this.#tenantKeys.size >= MAX_CACHED_TENANT_KEYS) this.#tenantKeys.clear();
      key = derive(this.#root, `tokenproxy/v1/${purpose}\0${tenantId}`);
      this.#tenantKeys.set(cacheKey, key);
    }
    return key;
  }

  #wrap(kid: string): WrappedDataKey {
    const dataKey = randomBytes(KEY_BYTES);
    try {
      return { kid, wrapped: this.#kek.wrap(kid, dataKey), created_at: new Date().toISOString() };
    } finally {
      dataKey.fill(0);
    }
  }

  #unwrap(kid: string, key: WrappedDataKey): KeyObject {
    if (!KID_PATTERN.test(kid)) throw new Error(`data key ${JSON.stringify(key.kid)} in the store is malformed`);
    const cacheKey = `${kid}\0${key.wrapped}`;
    const known = this.#unwrapped.get(cacheKey);
    if (known) return known;
    const plain = this.#kek.unwrap(kid, key.wrapped);
    const dataKey = createSecretKey(plain);
    plain.fill(0);
    this.#unwrapped.set(cacheKey, dataKey);
    return dataKey;
  }

  /** Unwraps every key before swapping, so a failure leaves the ring as it was. */
  #load(wrapped: WrappedDataKey[]): void {
    const groups = groupEntries(wrapped).keys;
    if (groups.size === 0) throw new Error('the store holds no data keys');
    const from = JSON.stringify(wrapped.map((w) => [w.kid, w.wrapped]));
    if (from === this.#loadedFrom) return;
    const keys = new Map<string, KeyObject>();
    for (const [kid, entries] of groups) {
      // The entry this master key wrapped; else the first, whose unwrap names the key that did.
      const entry = entries.find((e) => wrappedBy(e.wrapped) === this.#masterId) ?? entries[0]!;
      keys.set(kid, this.#unwrap(kid, entry));
    }
    this.#keys = keys;
    this.#active = [...groups.keys()][groups.size - 1]!;
    this.#loadedFrom = from;
  }
}
