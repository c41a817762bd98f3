/**
 * The master key in an HSM, through PKCS#11 (the `pkcs11js` package, Node-API: one build serves
 * every Node version). The key never leaves the HSM: the HSM wraps and unwraps the data keys and
 * the root secret (crypto/kek.ts), once per key at start-up or when a new one appears in the store;
 * the unwrapped keys are held in memory as with a raw master key, so no request waits on the HSM.
 *
 * Mechanisms, in the order `auto` tries them for a key that may wrap (CKA_WRAP/CKA_UNWRAP):
 * CKM_AES_KEY_WRAP_KWP (RFC 5649, PKCS#11 3.0), CKM_AES_KEY_WRAP_PAD (the 2.40 constant,
 * which SoftHSM2 and others implement as RFC 5649), CKM_AES_KEY_WRAP (RFC 3394: a 32-byte key
 * needs no padding). A key that may only encrypt (CKA_ENCRYPT/CKA_DECRYPT, as some cloud HSMs
 * create them) uses CKM_AES_GCM with C_Encrypt/C_Decrypt, a random IV and the kid as AAD. A
 * wrapped value names its mechanism: `h1.<key id>.<kwp|kwpad|kw|gcm>.<base64url>`.
 *
 * The key id is public: the SHA-256 of a fixed 32-byte value wrapped (or, for GCM, encrypted
 * under a fixed IV, the only value ever sealed under it) by the key. KW and KWP are deterministic,
 * so the same key on another HSM of the same family (a cluster, a restored backup) has the same id.
 *
 * Nothing here puts the PIN in a message: PKCS#11 errors are reported by their CKR_ name.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import type * as P11 from 'pkcs11js';
import { MasterKeyMismatchError } from './errors.js';
import { KEY_BYTES, mismatch, wrappedBy, type KeyEncryptionKey } from './kek.js';

export const PKCS11_PACKAGE = 'pkcs11js@2.1.7';
const FORMAT = 'h1';

export type Pkcs11Mechanism = 'auto' | 'aes_key_wrap_pad' | 'aes_key_wrap' | 'aes_gcm';

export interface Pkcs11Settings {
  /** The vendor's PKCS#11 library (.so). */
  module: string;
  token_label: string;
  key_label: string;
  mechanism?: Pkcs11Mechanism;
}

/** The HSM cannot be used (library, token, PIN, key): start-up fails with this message. */
export class HsmUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HsmUnavailableError';
  }
}

const CKM = { KW: 0x2109, KWPAD: 0x210a, KWP: 0x210b, GCM: 0x1087 } as const;
const CKF_ENCRYPT = 0x100;
const CKF_DECRYPT = 0x200;
const CKF_WRAP = 0x20000;
const CKF_UNWRAP = 0x40000;
const CKR_USER_ALREADY_LOGGED_IN = 0x100;
const CKR_CRYPTOKI_ALREADY_INITIALIZED = 0x191;
/** Errors after which a new session (and login) may succeed: the HSM restarted, a network HSM reconnected. */
const SESSION_LOST = new Set([0x30, 0x31, 0x32, 0x60, 0xb0, 0xb3, 0xe0, 0x101, 0x190]);

type Tag = 'kwp' | 'kwpad' | 'kw' | 'gcm';
const TAG_MECHANISM: Record<Tag, number> = { kwp: CKM.KWP, kwpad: CKM.KWPAD, kw: CKM.KW, gcm: CKM.GCM };
const MECHANISM_NAME: Record<Tag, string> = {
  kwp: 'CKM_AES_KEY_WRAP_KWP', kwpad: 'CKM_AES_KEY_WRAP_PAD', kw: 'CKM_AES_KEY_WRAP', gcm: 'CKM_AES_GCM',
};
const GCM_IV_BYTES = 12;
/** The value wrapped to compute the key id (not a secret: it only has to be the same everywhere). */
const ID_PLAIN = createHash('sha256').update('tokenproxy/v1/hsm-key-id').digest();

let pkcs11js: typeof P11 | null = null;

function library(): typeof P11 {
  if (pkcs11js) return pkcs11js;
  try {
    pkcs11js = createRequire(import.meta.url)('pkcs11js') as typeof P11;
    return pkcs11js;
  } catch (err) {
    const code = err instanceof Error && 'code' in err ? String(err.code) : 'error';
    throw new HsmUnavailableError(
      `secrets.master_key kind pkcs11 needs the optional package pkcs11js, which is not installed or did not build (${code}): ` +
        `npm install ${PKCS11_PACKAGE} (it compiles with node-gyp: python3, make and a C++ compiler)`,
    );
  }
}

/** A PKCS#11 error by its CKR_ name (never its native stack or arguments). */
function reason(err: unknown): string {
  if (err instanceof Error) {
    const m = /CKR_[A-Z0-9_]+/.exec(err.message);
    if (m) return m[0];
    return err.message.split('\n')[0]!.slice(0, 200);
  }
  return 'error';
}

function ckr(err: unknown): number | null {
  return err instanceof Error && 'code' in err && typeof err.code === 'number' ? err.code : null;
}

/** One loaded and initialized library per module path, shared by the keys of a process. */
const modules = new Map<string, { lib: P11.PKCS11; refs: number }>();

function acquire(path: string): P11.PKCS11 {
  const held = modules.get(path);
  if (held) {
    held.refs++;
    return held.lib;
  }
  const P = library();
  const lib = new P.PKCS11();
  try {
    lib.load(path);
  } catch (err) {
    throw new HsmUnavailableError(`cannot load the PKCS#11 module ${path} (secrets.master_key.module): ${reason(err)}`);
  }
  try {
    lib.C_Initialize({ flags: P.CKF_OS_LOCKING_OK });
  } catch (err) {
    if (ckr(err) !== CKR_CRYPTOKI_ALREADY_INITIALIZED) {
      try { lib.close(); } catch { /* nothing to release */ }
      throw new HsmUnavailableError(`the PKCS#11 module ${path} does not initialize: ${reason(err)}`);
    }
  }
  modules.set(path, { lib, refs: 1 });
  return lib;
}

function release(path: string): void {
  const held = modules.get(path);
  if (!held || --held.refs > 0) return;
  modules.delete(path);
  try {
    held.lib.C_Finalize();
  } catch {
    // the module is going away either way
  }
  try {
    held.lib.close();
  } catch {
    // already unloaded
  }
}

interface Opened {
  session: Buffer;
  key: Buffer;
}

/** A logged-in session on the token with this label, and the secret key with this label (or null). */
function openSession(lib: P11.PKCS11, s: Pkcs11Settings, pin: string, rw: boolean): { session: Buffer; slot: Buffer; key: Buffer | null } {
  const P = library();
  let slots: Buffer[];
  try {
    slots = lib.C_GetSlotList(true);
  } catch (err) {
    throw new HsmUnavailableError(`the PKCS#11 module ${s.module} lists no slots: ${reason(err)}`);
  }
  const labels: string[] = [];
  let slot: Buffer | null = null;
  for (const candidate of slots) {
    const label = lib.C_GetTokenInfo(candidate).label.replace(/[\s\0]+$/, '');
    labels.push(label);
    if (label === s.token_label) {
      slot = candidate;
      break;
    }
  }
  if (!slot) {
    throw new HsmUnavailableError(`the PKCS#11 module ${s.module} has no token labelled ${JSON.stringify(s.token_label)} (secrets.master_key.token_label; tokens: ${labels.map((l) => JSON.stringify(l)).join(', ') || 'none'})`);
  }
  let session: Buffer;
  try {
    session = lib.C_OpenSession(slot, P.CKF_SERIAL_SESSION | (rw ? P.CKF_RW_SESSION : 0));
  } catch (err) {
    throw new HsmUnavailableError(`cannot open a session on the token ${JSON.stringify(s.token_label)}: ${reason(err)}`);
  }
  try {
    try {
      lib.C_Login(session, P.CKU_USER, pin);
    } catch (err) {
      if (ckr(err) !== CKR_USER_ALREADY_LOGGED_IN) {
        throw new HsmUnavailableError(`cannot log in to the token ${JSON.stringify(s.token_label)} with the PIN of secrets.master_key (pin_file or pin_env): ${reason(err)}`);
      }
    }
    lib.C_FindObjectsInit(session, [
      { type: P.CKA_CLASS, value: P.CKO_SECRET_KEY },
      { type: P.CKA_LABEL, value: s.key_label },
    ]);
    let found: Buffer[];
    try {
      found = lib.C_FindObjects(session, 2);
    } finally {
      lib.C_FindObjectsFinal(session);
    }
    if (found.length > 1) {
      throw new HsmUnavailableError(`the token ${JSON.stringify(s.token_label)} holds more than one secret key labelled ${JSON.stringify(s.key_label)}: give the master key a label of its own`);
    }
    return { session, slot, key: found[0] ?? null };
  } catch (err) {
    try { lib.C_CloseSession(session); } catch { /* closing a session that failed */ }
    throw err instanceof HsmUnavailableError ? err : new HsmUnavailableError(`the token ${JSON.stringify(s.token_label)}: ${reason(err)}`);
  }
}

function flags(lib: P11.PKCS11, slot: Buffer, mechanism: number): number {
  try {
    return lib.C_GetMechanismList(slot).includes(mechanism) ? lib.C_GetMechanismInfo(slot, mechanism).flags : 0;
  } catch {
    return 0;
  }
}

/** The mechanism this key and token use (see the module comment), or a message saying why none. */
function chooseMechanism(lib: P11.PKCS11, slot: Buffer, session: Buffer, key: Buffer, s: Pkcs11Settings): Tag {
  const P = library();
  const attrs = lib.C_GetAttributeValue(session, key, [
    { type: P.CKA_KEY_TYPE }, { type: P.CKA_WRAP }, { type: P.CKA_UNWRAP }, { type: P.CKA_ENCRYPT }, { type: P.CKA_DECRYPT },
  ]);
  const bool = (i: number) => Buffer.isBuffer(attrs[i]!.value) ? (attrs[i]!.value as Buffer)[0] === 1 : attrs[i]!.value === true;
  // A CK_ULONG in the platform's byte order: 8 bytes on 64-bit Linux.
  const typeBytes = attrs[0]!.value;
  const keyType = Buffer.isBuffer(typeBytes)
    ? typeBytes.length === 8 ? Number(typeBytes.readBigUInt64LE()) : typeBytes.length === 4 ? typeBytes.readUInt32LE() : -1
    : typeBytes;
  if (keyType !== P.CKK_AES) throw new HsmUnavailableError(`the key ${JSON.stringify(s.key_label)} is not an AES key`);
  const canWrap = bool(1) && bool(2);
  const canEncrypt = bool(3) && bool(4);
  const want = s.mechanism ?? 'auto';
  const wrapTags: Tag[] = want === 'aes_key_wrap' ? ['kw'] : want === 'aes_key_wrap_pad' ? ['kwp', 'kwpad'] : want === 'auto' ? ['kwp', 'kwpad', 'kw'] : [];
  if (canWrap) {
    for (const tag of wrapTags) {
      if ((flags(lib, slot, TAG_MECHANISM[tag]) & (CKF_WRAP | CKF_UNWRAP)) === (CKF_WRAP | CKF_UNWRAP)) return tag;
    }
  }
  if ((want === 'auto' || want === 'aes_gcm') && canEncrypt && (flags(lib, slot, CKM.GCM) & (CKF_ENCRYPT | CKF_DECRYPT)) === (CKF_ENCRYPT | CKF_DECRYPT)) return 'gcm';
  const looked = want === 'auto' ? 'CKM_AES_KEY_WRAP_KWP, CKM_AES_KEY_WRAP_PAD or CKM_AES_KEY_WRAP (a key with CKA_WRAP and CKA_UNWRAP), or CKM_AES_GCM (a key with CKA_ENCRYPT and CKA_DECRYPT)'
    : want === 'aes_gcm' ? 'CKM_AES_GCM with a key that has CKA_ENCRYPT and CKA_DECRYPT'
      : `${wrapTags.map((t) => MECHANISM_NAME[t]).join(' or ')} with a key that has CKA_WRAP and CKA_UNWRAP`;
  throw new HsmUnavailableError(`the key ${JSON.stringify(s.key_label)} on the token ${JSON.stringify(s.token_label)} cannot be used: tokenproxy needs ${looked}`);
}

export class Pkcs11Kek implements KeyEncryptionKey {
  readonly kind = 'pkcs11' as const;
  readonly id: string;
  readonly mechanism: string;
  readonly #lib: P11.PKCS11;
  readonly #settings: Pkcs11Settings;
  readonly #pin: string;
  readonly #tag: Tag;
  #opened: Opened | null;
  #closed = false;

  private constructor(lib: P11.PKCS11, settings: Pkcs11Settings, pin: string, opened: Opened, tag: Tag) {
    this.#lib = lib;
    this.#settings = settings;
    this.#pin = pin;
    this.#opened = opened;
    this.#tag = tag;
    this.mechanism = MECHANISM_NAME[tag];
    const sample = this.#call((o) => this.#seal(o, ID_PLAIN, null));
    this.id = createHash('sha256').update('tokenproxy/v1/hsm-key-id\0').update(sample).digest('hex').slice(0, 16);
  }

  /** Loads the module, logs in and finds the key; HsmUnavailableError says what failed. */
  static open(settings: Pkcs11Settings, pin: string): Pkcs11Kek {
    const lib = acquire(settings.module);
    try {
      const { session, slot, key } = openSession(lib, settings, pin, false);
      try {
        if (!key) throw new HsmUnavailableError(`the token ${JSON.stringify(settings.token_label)} holds no secret key labelled ${JSON.stringify(settings.key_label)} (secrets.master_key.key_label; tokenproxy hsm init creates one)`);
        const tag = chooseMechanism(lib, slot, session, key, settings);
        return new Pkcs11Kek(lib, settings, pin, { session, key }, tag);
      } catch (err) {
        try { lib.C_CloseSession(session); } catch { /* closing a session that failed */ }
        throw err instanceof HsmUnavailableError ? err : new HsmUnavailableError(`the key ${JSON.stringify(settings.key_label)}: ${reason(err)}`);
      }
    } catch (err) {
      release(settings.module);
      throw err;
    }
  }

  rawRoot(): null {
    return null;
  }

  wrap(kid: string, key: Buffer): string {
    if (key.length !== KEY_BYTES) throw new Error(`a wrapped key must be ${KEY_BYTES} bytes`);
    const body = this.#call((o) => this.#seal(o, key, kid));
    return `${FORMAT}.${this.id}.${this.#tag}.${body.toString('base64url')}`;
  }

  unwrap(kid: string, wrapped: string): Buffer {
    const parts = wrapped.split('.');
    const by = wrappedBy(wrapped);
    if (parts.length !== 4 || parts[0] !== FORMAT || !(parts[2]! in TAG_MECHANISM) || !/^[A-Za-z0-9_-]+$/.test(parts[3]!)) throw mismatch(kid, by, this.id);
    if (by !== this.id) throw mismatch(kid, by, this.id);
    const tag = parts[2] as Tag;
    const body = Buffer.from(parts[3]!, 'base64url');
    let plain: Buffer;
    try {
      plain = this.#call((o) => this.#open(o, tag, body, kid));
    } catch (err) {
      if (err instanceof HsmUnavailableError) throw err;
      throw new MasterKeyMismatchError(`the master key does not match the store: data key ${kid} cannot be unwrapped by the HSM (${reason(err)}: a corrupt key record)`);
    }
    if (plain.length !== KEY_BYTES) {
      plain.fill(0);
      throw new MasterKeyMismatchError(`the master key does not match the store: data key ${kid} unwraps to ${plain.length} bytes, not ${KEY_BYTES} (a corrupt key record)`);
    }
    return plain;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#opened) {
      try { this.#lib.C_CloseSession(this.#opened.session); } catch { /* the HSM is gone: nothing to close */ }
      this.#opened = null;
    }
    release(this.#settings.module);
  }

  /** Runs an operation; when the session was lost (HSM restarted, network HSM reconnected), opens a new one and tries once more. */
  #call<T>(op: (o: Opened) => T): T {
    if (this.#closed) throw new Error('the HSM master key is closed');
    if (this.#opened) {
      try {
        return op(this.#opened);
      } catch (err) {
        const code = ckr(err);
        if (code === null || !SESSION_LOST.has(code)) throw err;
        try { this.#lib.C_CloseSession(this.#opened.session); } catch { /* already gone */ }
        this.#opened = null;
      }
    }
    const { session, key } = openSession(this.#lib, this.#settings, this.#pin, false);
    if (!key) {
      try { this.#lib.C_CloseSession(session); } catch { /* closing */ }
      throw new HsmUnavailableError(`the token ${JSON.stringify(this.#settings.token_label)} no longer holds a secret key labelled ${JSON.stringify(this.#settings.key_label)}`);
    }
    this.#opened = { session, key };
    try {
      return op(this.#opened);
    } catch (err) {
      const code = ckr(err);
      if (code !== null && SESSION_LOST.has(code)) throw new HsmUnavailableError(`the HSM does not answer: ${reason(err)}`);
      throw err;
    }
  }

  /** Wraps (KW, KWP) or encrypts (GCM) 32 bytes; `kid` null: the key id's fixed IV. */
  #seal(o: Opened, plain: Buffer, kid: string | null): Buffer {
    const P = library();
    if (this.#tag === 'gcm') {
      const iv = kid === null ? Buffer.alloc(GCM_IV_BYTES) : randomBytes(GCM_IV_BYTES);
      this.#lib.C_EncryptInit(o.session, this.#gcm(iv, kid), o.key);
      const out = this.#lib.C_Encrypt(o.session, plain, Buffer.alloc(plain.length + 16));
      return Buffer.concat([iv, out]);
    }
    const temp = this.#lib.C_CreateObject(o.session, [
      { type: P.CKA_CLASS, value: P.CKO_SECRET_KEY }, { type: P.CKA_KEY_TYPE, value: P.CKK_AES },
      { type: P.CKA_TOKEN, value: false }, { type: P.CKA_VALUE, value: plain },
      { type: P.CKA_SENSITIVE, value: false }, { type: P.CKA_EXTRACTABLE, value: true },
    ]);
    try {
      return Buffer.from(this.#lib.C_WrapKey(o.session, { mechanism: TAG_MECHANISM[this.#tag] }, o.key, temp, Buffer.alloc(KEY_BYTES + 64)));
    } finally {
      try { this.#lib.C_DestroyObject(o.session, temp); } catch { /* a session object ends with its session */ }
    }
  }

  #open(o: Opened, tag: Tag, body: Buffer, kid: string): Buffer {
    const P = library();
    if (tag === 'gcm') {
      if (body.length < GCM_IV_BYTES + 16) throw new Error('CKR_ENCRYPTED_DATA_LEN_RANGE');
      this.#lib.C_DecryptInit(o.session, this.#gcm(body.subarray(0, GCM_IV_BYTES), kid), o.key);
      return Buffer.from(this.#lib.C_Decrypt(o.session, body.subarray(GCM_IV_BYTES), Buffer.alloc(body.length)));
    }
    const handle = this.#lib.C_UnwrapKey(o.session, { mechanism: TAG_MECHANISM[tag] }, o.key, body, [
      { type: P.CKA_CLASS, value: P.CKO_SECRET_KEY }, { type: P.CKA_KEY_TYPE, value: P.CKK_AES },
      { type: P.CKA_TOKEN, value: false }, { type: P.CKA_SENSITIVE, value: false }, { type: P.CKA_EXTRACTABLE, value: true },
    ]);
    try {
      const value = this.#lib.C_GetAttributeValue(o.session, handle, [{ type: P.CKA_VALUE }])[0]!.value;
      if (!Buffer.isBuffer(value)) throw new Error('CKR_ATTRIBUTE_TYPE_INVALID');
      const copy = Buffer.from(value);
      value.fill(0);
      return copy;
    } finally {
      try { this.#lib.C_DestroyObject(o.session, handle); } catch { /* a session object ends with its session */ }
    }
  }

  #gcm(iv: Buffer, kid: string | null): P11.Mechanism {
    const P = library();
    const aad = Buffer.from(`${FORMAT}.gcm.${kid ?? ''}`, 'utf8');
    return { mechanism: CKM.GCM, parameter: { type: P.CK_PARAMS_AES_GCM, iv, aad, ivBits: GCM_IV_BYTES * 8, tagBits: 128 } as P11.AesGCM };
  }
}

export interface HsmInitResult {
  /** The new key's id (as in every value it wraps). */
  id: string;
  mechanism: string;
}

/**
 * `tokenproxy hsm init`: creates a non-extractable AES-256 key on the token that may only wrap
 * and unwrap (or, with mechanism aes_gcm, only encrypt and decrypt). For SoftHSM2 and development:
 * a production HSM's key comes from its own key ceremony. Refuses a label that is taken.
 */
export function hsmInit(settings: Pkcs11Settings, pin: string): HsmInitResult {
  const P = library();
  const lib = acquire(settings.module);
  try {
    const { session, key } = openSession(lib, settings, pin, true);
    try {
      if (key) throw new HsmUnavailableError(`the token ${JSON.stringify(settings.token_label)} already holds a secret key labelled ${JSON.stringify(settings.key_label)}: nothing was created`);
      const gcm = settings.mechanism === 'aes_gcm';
      try {
        lib.C_GenerateKey(session, { mechanism: P.CKM_AES_KEY_GEN }, [
          { type: P.CKA_CLASS, value: P.CKO_SECRET_KEY }, { type: P.CKA_KEY_TYPE, value: P.CKK_AES }, { type: P.CKA_VALUE_LEN, value: KEY_BYTES },
          { type: P.CKA_TOKEN, value: true }, { type: P.CKA_PRIVATE, value: true }, { type: P.CKA_LABEL, value: settings.key_label },
          { type: P.CKA_ID, value: randomBytes(8) },
          { type: P.CKA_SENSITIVE, value: true }, { type: P.CKA_EXTRACTABLE, value: false },
          { type: P.CKA_WRAP, value: !gcm }, { type: P.CKA_UNWRAP, value: !gcm },
          { type: P.CKA_ENCRYPT, value: gcm }, { type: P.CKA_DECRYPT, value: gcm },
          { type: P.CKA_SIGN, value: false }, { type: P.CKA_VERIFY, value: false }, { type: P.CKA_DERIVE, value: false },
        ]);
      } catch (err) {
        throw new HsmUnavailableError(`the token ${JSON.stringify(settings.token_label)} did not create the key: ${reason(err)}`);
      }
    } finally {
      try { lib.C_CloseSession(session); } catch { /* closing */ }
    }
  } finally {
    release(settings.module);
  }
  const kek = Pkcs11Kek.open(settings, pin);
  try {
    return { id: kek.id, mechanism: kek.mechanism };
  } finally {
    kek.close();
  }
}
