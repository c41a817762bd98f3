/**
 * The embedded store's compact token format, schema version 6. Format 5 kept a
 * token as a JSON record (base64url ciphertext, hex digests, text UUIDs, the tenant and app ids
 * spelled out in every row) beside columns that repeated half of it: 1,132 bytes a token.
 * Format 6 keeps each field once, in binary where it is binary:
 *
 * - ids: a canonical UUID (what the vault makes, lower-case hex) is a 16-byte BLOB; any other
 *   (custom) id stays TEXT. SQLite keeps the type with the value, so a TEXT id never equals a BLOB.
 * - sealed values `v1.<kid>.<iv>.<body>` are one BLOB (tag 1, the kid, the iv, the body) when their
 *   base64url parts are canonical; anything else is kept as the TEXT it was.
 * - digests (fingerprints, search hashes): lower-case hex of whole bytes is a BLOB, else TEXT.
 * - tenant ids, types, containers, the creating application and fingerprint expressions (a few
 *   values each, repeated in every row) are numbers into the `dict` table.
 * - times are epoch ms columns; an ISO string that is not what toISOString() writes back is kept
 *   as it was in `rest`, so every record reads back exactly.
 * - `rest`: JSON of the optional fields present (metadata, search indexes and their hashes, mask,
 *   modified_by/at), NULL when none is: a token from a plain /tokenize has no JSON at all.
 *
 * Reads and writes share this codec: connection.ts's reads on the main thread, writer.ts and the
 * 5 → 6 conversion (migrate.ts) on theirs. Nothing here decrypts: ciphertext is moved as it is.
 */
import type Database from 'better-sqlite3';
import type { StoredToken } from '../types.js';
import { StoreUnavailableError } from '../types.js';

export const FORMAT_VERSION = 6;

/** The tables of format 6 (created at open on a new file, or by the conversion of an older one). */
export const SCHEMA_V6 = `
CREATE TABLE IF NOT EXISTS dict (n INTEGER PRIMARY KEY, s TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS vault_tokens (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant INTEGER NOT NULL, id NOT NULL, type INTEGER NOT NULL, container INTEGER NOT NULL,
  sealed NOT NULL, fingerprint, expires_ms INTEGER, cvc_sealed, cvc_expires_ms INTEGER,
  created_by INTEGER NOT NULL, created_ms INTEGER NOT NULL, fp_expr INTEGER, dedupe INTEGER, rest
);
CREATE UNIQUE INDEX IF NOT EXISTS vault_tokens_id ON vault_tokens (tenant, id);
CREATE INDEX IF NOT EXISTS vault_tokens_by_tenant ON vault_tokens (tenant, seq);
CREATE INDEX IF NOT EXISTS vault_tokens_by_fingerprint ON vault_tokens (tenant, fingerprint) WHERE fingerprint IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS vault_tokens_dedupe ON vault_tokens (tenant, type, container, fingerprint) WHERE dedupe IS NOT NULL;
CREATE INDEX IF NOT EXISTS vault_tokens_cvc_due ON vault_tokens (cvc_expires_ms) WHERE cvc_sealed IS NOT NULL;
CREATE TABLE IF NOT EXISTS vault_hashes (
  tenant INTEGER NOT NULL, hash NOT NULL, seq INTEGER NOT NULL REFERENCES vault_tokens (seq) ON DELETE CASCADE,
  PRIMARY KEY (tenant, hash, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS vault_hashes_by_seq ON vault_hashes (seq);
CREATE TABLE IF NOT EXISTS vault_meta (
  tenant INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, seq INTEGER NOT NULL REFERENCES vault_tokens (seq) ON DELETE CASCADE,
  PRIMARY KEY (tenant, key, value, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS vault_meta_by_seq ON vault_meta (seq);`;

/** A stored id, fingerprint, hash or sealed value: binary when canonical, else the text. */
export type Packed = Buffer | string;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HEX = /^(?:[0-9a-f]{2})+$/;
const B64URL = /^[A-Za-z0-9_-]*$/;
const SEALED_TAG = 1;

export function packId(id: string): Packed {
  return UUID.test(id) ? Buffer.from(id.replace(/-/g, ''), 'hex') : id;
}

export function unpackId(v: unknown): string {
  if (typeof v === 'string') return v;
  if (Buffer.isBuffer(v) && v.length === 16) {
    const h = v.toString('hex');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }
  throw corrupt();
}

export function packHex(s: string): Packed {
  return HEX.test(s) ? Buffer.from(s, 'hex') : s;
}

export function unpackHex(v: unknown): string {
  if (typeof v === 'string') return v;
  if (Buffer.isBuffer(v)) return v.toString('hex');
  throw corrupt();
}

/** base64url that decodes and encodes back to itself (no padding, no stray bits). */
function canonical64(s: string): Buffer | null {
  if (!B64URL.test(s) || s.length % 4 === 1) return null;
  const b = Buffer.from(s, 'base64url');
  return b.toString('base64url') === s ? b : null;
}

export function packSealed(s: string): Packed {
  const parts = s.split('.');
  if (parts.length !== 4 || parts[0] !== 'v1' || parts[1]!.length === 0 || parts[1]!.length > 255) return s;
  const kid = Buffer.from(parts[1]!, 'latin1');
  const iv = canonical64(parts[2]!);
  const body = canonical64(parts[3]!);
  if (!iv || !body || iv.length > 255 || kid.toString('latin1') !== parts[1] || /[^\x21-\x7e]/.test(parts[1]!)) return s;
  return Buffer.concat([Buffer.from([SEALED_TAG, kid.length]), kid, Buffer.from([iv.length]), iv, body]);
}

export function unpackSealed(v: unknown): string {
  if (typeof v === 'string') return v;
  if (!Buffer.isBuffer(v) || v.length < 3 || v[0] !== SEALED_TAG) throw corrupt();
  const kidEnd = 2 + v[1]!;
  const ivEnd = kidEnd + 1 + (v[kidEnd] ?? 0);
  if (ivEnd > v.length) throw corrupt();
  return `v1.${v.toString('latin1', 2, kidEnd)}.${v.toString('base64url', kidEnd + 1, ivEnd)}.${v.toString('base64url', ivEnd)}`;
}

type PackedTime = Readonly<{ ms: number | null; exact: string | null }>;
const NO_TIME: PackedTime = { ms: null, exact: null };
/** The last time packed: a batch's records share their created_at. */
let lastTime: { iso: string; packed: PackedTime } | null = null;

/** Epoch ms of an ISO time, and the ISO string itself when toISOString() would not give it back. */
export function packTime(iso: string | null, field: string): PackedTime {
  if (iso === null) return NO_TIME;
  if (lastTime !== null && lastTime.iso === iso) return lastTime.packed;
  const ms = Date.parse(iso);
  if (!Number.isFinite(ms)) throw new TypeError(`${field} is not a valid ISO 8601 date`);
  const packed = { ms, exact: new Date(ms).toISOString() === iso ? null : iso };
  lastTime = { iso, packed };
  return packed;
}

/** The optional fields, as `rest` holds them (short names: this JSON is in every row that has one). */
interface Rest {
  m?: Record<string, string>;
  si?: string[];
  ih?: string[];
  mk?: string;
  mb?: string;
  ma?: string;
  /** created_at, expires_at, cvc_expires_at as given, when not canonical */
  ca?: string;
  ea?: string;
  ce?: string;
}

/** The columns of one token (what the wire carries to the writer: strings and numbers only). */
export interface TokenColumns {
  tenant: string;
  id: string;
  type: string;
  container: string;
  sealed: string;
  fingerprint: string | null;
  expires_ms: number | null;
  cvc_sealed: string | null;
  cvc_expires_ms: number | null;
  created_by: string;
  created_ms: number;
  fp_expr: string | null;
  rest: string | null;
}

export function toColumns(r: StoredToken): TokenColumns {
  const created = packTime(r.created_at, 'created_at');
  const expires = packTime(r.expires_at, 'expires_at');
  const cvc = packTime(r.cvc_expires_at, 'cvc_expires_at');
  const modified = r.modified_at === null ? null : packTime(r.modified_at, 'modified_at');
  const rest: Rest = {};
  if (Object.keys(r.metadata).length > 0) rest.m = r.metadata;
  if (r.search_indexes.length > 0) rest.si = r.search_indexes;
  if (r.index_hashes.length > 0) rest.ih = r.index_hashes;
  if (r.mask !== null) rest.mk = r.mask;
  if (r.modified_by !== null) rest.mb = r.modified_by;
  if (modified !== null) rest.ma = r.modified_at!;
  if (created.exact !== null) rest.ca = created.exact;
  if (expires.exact !== null) rest.ea = expires.exact;
  if (cvc.exact !== null) rest.ce = cvc.exact;
  return {
    tenant: r.tenant_id, id: r.id, type: r.type, container: r.container, sealed: r.sealed, fingerprint: r.fingerprint,
    expires_ms: expires.ms, cvc_sealed: r.cvc_sealed, cvc_expires_ms: cvc.ms, created_by: r.created_by, created_ms: created.ms!,
    fp_expr: r.fingerprint_expression, rest: Object.keys(rest).length > 0 ? JSON.stringify(rest) : null,
  };
}

/** A row of vault_tokens as the reads select it (ROW_COLUMNS): the stored columns and the sequence. */
export interface TokenRow extends StoredColumns {
  seq: number;
}

export const ROW_COLUMNS = 'seq, tenant, id, type, container, sealed, fingerprint, expires_ms, cvc_sealed, cvc_expires_ms, created_by, created_ms, fp_expr, rest';

function corrupt(): StoreUnavailableError {
  return new StoreUnavailableError('a stored token record is corrupt');
}

const iso = (ms: number | null, exact: string | undefined): string | null => (exact ?? (ms === null ? null : new Date(ms).toISOString()));

/** The record a row holds; `cvcSealed` as the caller decides (a cvc past its deadline is not returned). */
export function fromRow(row: TokenRow, dict: Dict, cvcSealed: string | null): StoredToken {
  let rest: Rest = {};
  if (row.rest !== null) {
    try {
      rest = JSON.parse(row.rest) as Rest;
    } catch {
      throw corrupt();
    }
    if (typeof rest !== 'object' || rest === null) throw corrupt();
  }
  return {
    tenant_id: dict.name(row.tenant), id: unpackId(row.id), type: dict.name(row.type), container: dict.name(row.container),
    sealed: unpackSealed(row.sealed), cvc_sealed: cvcSealed, cvc_expires_at: iso(row.cvc_expires_ms, rest.ce),
    metadata: rest.m ?? {}, search_indexes: rest.si ?? [], index_hashes: rest.ih ?? [],
    fingerprint: row.fingerprint === null ? null : unpackHex(row.fingerprint),
    fingerprint_expression: row.fp_expr === null ? null : dict.name(row.fp_expr), mask: rest.mk ?? null,
    created_by: dict.name(row.created_by), created_at: iso(row.created_ms, rest.ca)!, modified_by: rest.mb ?? null,
    modified_at: rest.ma ?? null, expires_at: iso(row.expires_ms, rest.ea),
  };
}

export const cvcOf = (row: TokenRow): string | null => (row.cvc_sealed === null ? null : unpackSealed(row.cvc_sealed));

/**
 * The `dict` table, cached: its entries never change and are never deleted, so a number read once
 * names the same string for the life of the file. Only a writer adds (`number`), inside its
 * transaction; a rolled-back transaction may have added entries it cached: `forget()` then.
 */
export class Dict {
  readonly #names = new Map<number, string>();
  readonly #numbers = new Map<string, number>();
  readonly #select: Database.Statement<[number], { s: string }>;
  readonly #find: Database.Statement<[string], { n: number }>;
  #add: Database.Statement<[string]> | null = null;
  readonly #db: Database.Database;

  constructor(db: Database.Database) {
    this.#db = db;
    this.#select = db.prepare<[number], { s: string }>('SELECT s FROM dict WHERE n = ?');
    this.#find = db.prepare<[string], { n: number }>('SELECT n FROM dict WHERE s = ?');
  }

  name(n: number): string {
    let s = this.#names.get(n);
    if (s === undefined) {
      s = this.#select.get(n)?.s;
      if (s === undefined) throw corrupt();
      this.#names.set(n, s);
    }
    return s;
  }

  /** The number of an existing entry, or null (reads: a tenant never written has no tokens). */
  find(s: string): number | null {
    const cached = this.#numbers.get(s);
    if (cached !== undefined) return cached;
    const n = this.#find.get(s)?.n ?? null;
    if (n !== null) this.#numbers.set(s, n);
    return n;
  }

  /** The number of `s`, added when missing: inside a write transaction only. */
  number(s: string): number {
    const found = this.find(s);
    if (found !== null) return found;
    this.#add ??= this.#db.prepare<[string]>('INSERT INTO dict (s) VALUES (?)');
    const n = Number(this.#add.run(s).lastInsertRowid);
    this.#numbers.set(s, n);
    return n;
  }

  forget(): void {
    this.#numbers.clear();
    this.#names.clear();
  }
}

/** A token's columns as stored: dict numbers and packed values. */
export interface StoredColumns {
  tenant: number;
  id: Packed;
  type: number;
  container: number;
  sealed: Packed;
  fingerprint: Packed | null;
  expires_ms: number | null;
  cvc_sealed: Packed | null;
  cvc_expires_ms: number | null;
  created_by: number;
  created_ms: number;
  fp_expr: number | null;
  rest: string | null;
}

/** The side entries of one token (search hashes, metadata pairs), for the write statements. */
export interface SideEntries {
  index_hashes: readonly string[];
  metadata: Record<string, string>;
}

/**
 * The write statements of format 6, for the writer thread and the 5 → 6 conversion alike: an
 * insert returns the row's seq; `seq` given (the conversion) keeps the token's place in the lists.
 */
export class TokenWrites {
  readonly dict: Dict;
  readonly #insert: Database.Statement<unknown[]>;
  readonly #insertHash: Database.Statement<[number, Packed, number | bigint]>;
  readonly #insertMeta: Database.Statement<[number, string, string, number | bigint]>;
  readonly #deleteHashes: Database.Statement<[number]>;
  readonly #deleteMeta: Database.Statement<[number]>;

  constructor(db: Database.Database, dict = new Dict(db)) {
    this.dict = dict;
    this.#insert = db.prepare<unknown[]>(
      `INSERT INTO vault_tokens (seq, tenant, id, type, container, sealed, fingerprint, expires_ms, cvc_sealed, cvc_expires_ms, created_by, created_ms, fp_expr, dedupe, rest)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    this.#insertHash = db.prepare('INSERT OR IGNORE INTO vault_hashes (tenant, hash, seq) VALUES (?, ?, ?)');
    this.#insertMeta = db.prepare('INSERT OR IGNORE INTO vault_meta (tenant, key, value, seq) VALUES (?, ?, ?, ?)');
    this.#deleteHashes = db.prepare('DELETE FROM vault_hashes WHERE seq = ?');
    this.#deleteMeta = db.prepare('DELETE FROM vault_meta WHERE seq = ?');
  }

  /** The stored (numeric and binary) values of the columns, named as update binds them. */
  bind(c: TokenColumns): StoredColumns {
    const d = this.dict;
    return {
      tenant: d.number(c.tenant), id: packId(c.id), type: d.number(c.type), container: d.number(c.container), sealed: packSealed(c.sealed),
      fingerprint: c.fingerprint === null ? null : packHex(c.fingerprint), expires_ms: c.expires_ms,
      cvc_sealed: c.cvc_sealed === null ? null : packSealed(c.cvc_sealed), cvc_expires_ms: c.cvc_expires_ms,
      created_by: d.number(c.created_by), created_ms: c.created_ms, fp_expr: c.fp_expr === null ? null : d.number(c.fp_expr), rest: c.rest,
    };
  }

  insert(c: TokenColumns, side: SideEntries, dedupe: boolean, seq: number | null = null): number {
    const v = this.bind(c);
    // Positional: binding by name looks every parameter up on an object, per row.
    const at = Number(this.#insert.run(
      seq, v.tenant, v.id, v.type, v.container, v.sealed, v.fingerprint, v.expires_ms, v.cvc_sealed, v.cvc_expires_ms,
      v.created_by, v.created_ms, v.fp_expr, dedupe ? 1 : null, v.rest,
    ).lastInsertRowid);
    this.writeSide(v.tenant, side, at);
    return at;
  }

  writeSide(tenant: number, side: SideEntries, seq: number): void {
    for (const h of side.index_hashes) this.#insertHash.run(tenant, packHex(h), seq);
    for (const [k, v] of Object.entries(side.metadata)) this.#insertMeta.run(tenant, k, v, seq);
  }

  clearSide(seq: number): void {
    this.#deleteHashes.run(seq);
    this.#deleteMeta.run(seq);
  }
}
