/**
 * Layout 4's binary token record (raw bytes for ciphertext, ids and digests; no
 * JSON that repeats what a key holds). A hand-written layout, not msgpack or CBOR: its fixed
 * header is read by the Lua scripts (liveness, the deduplication match, the sequence number, the
 * cvc's place) with string.byte, which a general encoding would not let them do without decoding.
 *
 *   [0]      4 (the record format)
 *   [1..6]   expires_at, ms since the epoch, big-endian (0: none)
 *   [7..12]  cvc_expires_at, ms (0: none)
 *   [13..18] the tenant's sequence number (the insert script writes it)
 *   [19..22] where the cvc starts (the record's length when it has none), big-endian
 *   [23..]   type and container (str), the fingerprint (bytes, empty for none): the dedupe
 *            match compares these bytes as they are (dedupeKey);
 *            u16 flags; sealed; created_by (id); created_at (time); then, as flagged, the
 *            fingerprint_expression, mask, modified_by, modified_at, the
 *            expiry texts when not canonical, metadata (its JSON: keys and values as given),
 *            search_indexes, index_hashes (digests); then the cvc (sealed), cut off by the purge.
 *
 * Every field round-trips exactly: a value that is not in its compact form (an id that is not a
 * lowercase UUID, a digest that is not 64 hex, a sealed value not `v1.<kid>.<iv>.<body>` in
 * canonical base64url, a date not as toISOString writes it) is kept as text.
 */
import type { StoredToken } from '../types.js';
import { StoreUnavailableError } from '../types.js';

export const RECORD_FORMAT = 4;
export const HEADER = 23;
const MAX_MS = 2 ** 48 - 1;

const F = {
  fpExpr: 2, mask: 4, modifiedBy: 8, modifiedAt: 16, expiresText: 32, cvcText: 64,
  metadata: 128, searchIndexes: 256, indexHashes: 512, expires: 1024, cvcExpires: 2048, cardFpExpr: 4096,
} as const;

/** A card's default fingerprint expression (vault/definition.ts): a flag, not 18 bytes a card. */
const CARD_FP_EXPR = '{{ data.number }}';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HEX64 = /^[0-9a-f]{64}$/;
const SEALED = /^v1\.([A-Za-z0-9_-]{1,64})\.([A-Za-z0-9_-]{16})\.([A-Za-z0-9_-]{22,})$/;

function corrupt(): StoreUnavailableError {
  return new StoreUnavailableError('a stored token record is corrupt');
}

/** Text as bytes: UTF-8, or its JSON when it holds a lone surrogate (UTF-8 would lose it). */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function textBytes(s: string): { bytes: Buffer; json: boolean } {
  return !LONE_SURROGATE.test(s) ? { bytes: Buffer.from(s, 'utf8'), json: false } : { bytes: Buffer.from(JSON.stringify(s), 'utf8'), json: true };
}

function bytesText(b: Buffer, json: boolean): string {
  const s = b.toString('utf8');
  if (!json) return s;
  const v: unknown = JSON.parse(s);
  if (typeof v !== 'string') throw corrupt();
  return v;
}

/**
 * An id or digest in `size` raw bytes when it has its compact form (`hex` of 2·size digits, or a
 * lowercase UUID for 16), else a marker byte and its text, never `size` bytes long: so the length
 * alone tells the two apart. Used for hash fields, zset members and key names as well.
 */
export function packName(s: string, size: 16 | 32): Buffer {
  if (size === 16 ? UUID.test(s) : HEX64.test(s)) return Buffer.from(size === 16 ? s.replace(/-/g, '') : s, 'hex');
  const { bytes, json } = textBytes(s);
  const marker = json ? 2 : 0;
  return bytes.length + 1 === size ? Buffer.concat([Buffer.from([marker + 1, marker + 1]), bytes]) : Buffer.concat([Buffer.from([marker]), bytes]);
}

export function unpackName(b: Buffer, size: 16 | 32): string {
  if (b.length === size) {
    const hex = b.toString('hex');
    return size === 16 ? `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}` : hex;
  }
  const m = b[0];
  if (m === undefined || m > 3) throw corrupt();
  return bytesText(b.subarray(m % 2 === 1 ? 2 : 1), m >= 2);
}

export const packId = (id: string): Buffer => packName(id, 16);
export const unpackId = (b: Buffer): string => unpackName(b, 16);
export const packDigest = (d: string): Buffer => packName(d, 32);

/** The canonical ms of an ISO date, or null when toISOString would not write it back as given. */
function canonicalMs(iso: string): number | null {
  const ms = Date.parse(iso);
  return Number.isFinite(ms) && ms >= 1 && ms <= MAX_MS && new Date(ms).toISOString() === iso ? ms : null;
}

class Writer {
  #parts: Buffer[] = [];
  #small: number[] = [];

  #flush(): void {
    if (this.#small.length > 0) {
      this.#parts.push(Buffer.from(this.#small));
      this.#small = [];
    }
  }

  byte(n: number): void {
    this.#small.push(n & 0xff);
  }

  uvar(n: number): void {
    while (n >= 0x80) {
      this.#small.push((n % 0x80) | 0x80);
      n = Math.floor(n / 0x80);
    }
    this.#small.push(n);
  }

  raw(b: Buffer): void {
    this.#flush();
    this.#parts.push(b);
  }

  bytes(b: Buffer): void {
    this.uvar(b.length);
    this.raw(b);
  }

  str(s: string): void {
    const { bytes, json } = textBytes(s);
    this.uvar(bytes.length * 2 + (json ? 1 : 0));
    this.raw(bytes);
  }

  time(iso: string): void {
    const ms = canonicalMs(iso);
    if (ms === null) {
      this.byte(1);
      this.str(iso);
    } else {
      this.byte(0);
      this.raw(u48(ms));
    }
  }

  sealed(s: string): void {
    const m = SEALED.exec(s);
    const iv = m ? Buffer.from(m[2]!, 'base64url') : null;
    const body = m ? Buffer.from(m[3]!, 'base64url') : null;
    if (m && iv && body && iv.toString('base64url') === m[2] && body.toString('base64url') === m[3]) {
      this.byte(1);
      this.str(m[1]!);
      this.raw(iv);
      this.bytes(body);
    } else {
      this.byte(0);
      this.str(s);
    }
  }

  get length(): number {
    return this.#parts.reduce((n, p) => n + p.length, 0) + this.#small.length;
  }

  done(): Buffer {
    this.#flush();
    return Buffer.concat(this.#parts);
  }
}

class Reader {
  #b: Buffer;
  #i: number;

  constructor(b: Buffer, at: number) {
    this.#b = b;
    this.#i = at;
  }

  get at(): number {
    return this.#i;
  }

  byte(): number {
    const v = this.#b[this.#i++];
    if (v === undefined) throw corrupt();
    return v;
  }

  uvar(): number {
    let n = 0;
    let mul = 1;
    for (;;) {
      const b = this.byte();
      n += (b & 0x7f) * mul;
      if (b < 0x80) return n;
      mul *= 0x80;
      if (mul > 2 ** 49) throw corrupt();
    }
  }

  raw(n: number): Buffer {
    if (this.#i + n > this.#b.length) throw corrupt();
    const out = this.#b.subarray(this.#i, this.#i + n);
    this.#i += n;
    return out;
  }

  bytes(): Buffer {
    return this.raw(this.uvar());
  }

  str(): string {
    const tag = this.uvar();
    return bytesText(this.raw(Math.floor(tag / 2)), tag % 2 === 1);
  }

  time(): string {
    return this.byte() === 0 ? new Date(readU48(this.raw(6), 0)).toISOString() : this.str();
  }

  sealed(): string {
    if (this.byte() === 0) return this.str();
    const kid = this.str();
    const iv = this.raw(12);
    return `v1.${kid}.${iv.toString('base64url')}.${this.bytes().toString('base64url')}`;
  }
}

function u48(n: number): Buffer {
  const b = Buffer.alloc(6);
  b.writeUIntBE(n, 0, 6);
  return b;
}

function readU48(b: Buffer, at: number): number {
  return b.readUIntBE(at, 6);
}

/**
 * The bytes of type, container and fingerprint as the record holds them, right after its header:
 * what a deduplicating insert compares (the fingerprint hash's field is only a prefix of it).
 */
export function dedupeKey(type: string, container: string, fingerprint: string | null): Buffer {
  const w = new Writer();
  w.str(type);
  w.str(container);
  w.bytes(fingerprint === null ? Buffer.alloc(0) : packDigest(fingerprint));
  return w.done();
}

/**
 * The fingerprint hash's field: the first 8 bytes of the packed fingerprint (a 64-bit prefix of
 * the HMAC: 24 bytes a card less than the whole). Ids under one field may have other
 * fingerprints: readers compare the record's.
 */
export function fingerprintField(fingerprint: string): Buffer {
  return packDigest(fingerprint).subarray(0, 8);
}

/** The record's bytes, with `seq` in its header (the insert script overwrites it). */
export function encodeRecord(r: StoredToken, seq = 0): Buffer {
  const expMs = r.expires_at === null ? null : Date.parse(r.expires_at);
  const cvcMs = r.cvc_expires_at === null ? null : Date.parse(r.cvc_expires_at);
  if (expMs !== null && !Number.isFinite(expMs)) throw new TypeError('expires_at is not a valid ISO 8601 date');
  if (cvcMs !== null && !Number.isFinite(cvcMs)) throw new TypeError('cvc_expires_at is not a valid ISO 8601 date');
  const clamp = (ms: number): number => Math.min(MAX_MS, Math.max(1, ms));
  let flags = 0;
  const w = new Writer();
  w.raw(dedupeKey(r.type, r.container, r.fingerprint));
  const body = new Writer();
  body.sealed(r.sealed);
  body.bytes(packId(r.created_by));
  body.time(r.created_at);
  if (r.fingerprint_expression === CARD_FP_EXPR) flags |= F.cardFpExpr;
  else if (r.fingerprint_expression !== null) (flags |= F.fpExpr), body.str(r.fingerprint_expression);
  if (r.mask !== null) (flags |= F.mask), body.str(r.mask);
  if (r.modified_by !== null) (flags |= F.modifiedBy), body.bytes(packId(r.modified_by));
  if (r.modified_at !== null) (flags |= F.modifiedAt), body.time(r.modified_at);
  if (r.expires_at !== null) {
    flags |= F.expires;
    if (canonicalMs(r.expires_at) === null) (flags |= F.expiresText), body.str(r.expires_at);
  }
  if (r.cvc_expires_at !== null) {
    flags |= F.cvcExpires;
    if (canonicalMs(r.cvc_expires_at) === null) (flags |= F.cvcText), body.str(r.cvc_expires_at);
  }
  if (Object.keys(r.metadata).length > 0) (flags |= F.metadata), body.str(JSON.stringify(r.metadata));
  if (r.search_indexes.length > 0) {
    flags |= F.searchIndexes;
    body.uvar(r.search_indexes.length);
    for (const s of r.search_indexes) body.str(s);
  }
  if (r.index_hashes.length > 0) {
    flags |= F.indexHashes;
    body.uvar(r.index_hashes.length);
    for (const h of r.index_hashes) body.bytes(packDigest(h));
  }
  w.byte(flags >> 8);
  w.byte(flags);
  w.raw(body.done());
  const main = w.done();
  const header = Buffer.alloc(HEADER);
  header[0] = RECORD_FORMAT;
  header.writeUIntBE(expMs === null ? 0 : clamp(expMs), 1, 6);
  header.writeUIntBE(cvcMs === null ? 0 : clamp(cvcMs), 7, 6);
  header.writeUIntBE(seq, 13, 6);
  header.writeUInt32BE(HEADER + main.length, 19);
  if (r.cvc_sealed === null) return Buffer.concat([header, main]);
  const cvc = new Writer();
  cvc.sealed(r.cvc_sealed);
  return Buffer.concat([header, main, cvc.done()]);
}

export interface DecodedRecord {
  record: StoredToken;
  seq: number;
  /** ms, or null (what the header says; the record's text fields are exact). */
  expiresMs: number | null;
  cvcExpiresMs: number | null;
}

export function decodeRecord(tenantId: string, id: string, b: Buffer): DecodedRecord {
  if (b.length < HEADER || b[0] !== RECORD_FORMAT) throw corrupt();
  const expHeader = readU48(b, 1);
  const cvcHeader = readU48(b, 7);
  const seq = readU48(b, 13);
  const cvcAt = b.readUInt32BE(19);
  if (cvcAt > b.length || cvcAt < HEADER) throw corrupt();
  const r = new Reader(b, HEADER);
  const type = r.str();
  const container = r.str();
  const fpBytes = r.bytes();
  const fingerprint = fpBytes.length > 0 ? unpackName(fpBytes, 32) : null;
  const flags = (r.byte() << 8) | r.byte();
  const sealed = r.sealed();
  const createdBy = unpackId(r.bytes());
  const createdAt = r.time();
  const fpExpr = flags & F.cardFpExpr ? CARD_FP_EXPR : flags & F.fpExpr ? r.str() : null;
  const mask = flags & F.mask ? r.str() : null;
  const modifiedBy = flags & F.modifiedBy ? unpackId(r.bytes()) : null;
  const modifiedAt = flags & F.modifiedAt ? r.time() : null;
  const expiresAt = flags & F.expires ? (flags & F.expiresText ? r.str() : new Date(expHeader).toISOString()) : null;
  const cvcExpiresAt = flags & F.cvcExpires ? (flags & F.cvcText ? r.str() : new Date(cvcHeader).toISOString()) : null;
  let metadata: Record<string, string> = {};
  if (flags & F.metadata) {
    const v: unknown = JSON.parse(r.str());
    if (typeof v !== 'object' || v === null || Array.isArray(v) || !Object.values(v).every((x) => typeof x === 'string')) throw corrupt();
    metadata = v as Record<string, string>;
  }
  const searchIndexes: string[] = [];
  if (flags & F.searchIndexes) for (let n = r.uvar(); n > 0; n--) searchIndexes.push(r.str());
  const indexHashes: string[] = [];
  if (flags & F.indexHashes) for (let n = r.uvar(); n > 0; n--) indexHashes.push(unpackName(r.bytes(), 32));
  if (r.at !== cvcAt) throw corrupt();
  const cvcSealed = cvcAt < b.length ? new Reader(b, cvcAt).sealed() : null;
  return {
    record: {
      tenant_id: tenantId, id, type, container, sealed, cvc_sealed: cvcSealed, cvc_expires_at: cvcExpiresAt, metadata,
      search_indexes: searchIndexes, index_hashes: indexHashes, fingerprint, fingerprint_expression: fpExpr, mask,
      created_by: createdBy, created_at: createdAt, modified_by: modifiedBy, modified_at: modifiedAt, expires_at: expiresAt,
    },
    seq,
    expiresMs: expHeader === 0 ? null : expHeader,
    cvcExpiresMs: cvcHeader === 0 ? null : cvcHeader,
  };
}

/** A packed list of ids (the fingerprint hash's values): each a u16 length and its packed bytes. */
export function packIdEntry(idBytes: Buffer): Buffer {
  const len = Buffer.alloc(2);
  len.writeUInt16BE(idBytes.length);
  return Buffer.concat([len, idBytes]);
}
