/**
 * The token service: tokenize, create, read, update, delete, list and search. It plans and
 * validates everything first (pure modules), then seals, then writes one all-or-nothing batch.
 * Plaintext lives only in this process's memory between the request and the seal.
 */
import { randomUUID } from 'node:crypto';
import { grant, type Transform } from '../auth/access.js';
import type { Principal } from '../auth/keys.js';
import type { Permission } from '../config/schema.js';
import { ServiceError, type FieldErrors } from '../errors.js';
import { InvalidCursorError } from '../store/factory.js';
import { DuplicateTokenError, StoreUnavailableError, type StoredToken, type TokenFilter, type TokenStore } from '../store/types.js';
import type { CardData } from './card.js';
import { at, type Definition } from './definition.js';
import { ExpressionError, renderExpression } from './expressions.js';
import { createdRecord, needsPlaintext, readRecord, type TokenRecord } from './records.js';
import { parseQuery } from './search.js';
import { assemble, planTokenize } from './walk.js';
import { applyPatch } from './patch.js';

/** What the vault needs from the crypto layer (crypto/keyring.ts implements it). */
export interface VaultCrypto {
  seal(plaintext: string, aad: string): string;
  /** Opens a sealed value; reloads the key ring once when another instance rotated in a new key. */
  unsealOrRefresh(sealed: string, aad: string): Promise<string>;
  fingerprint(tenantId: string, type: string, value: string): string;
  indexHash(tenantId: string, value: string): string;
}

export interface TokenServiceOptions {
  maxDepth: number;
  cvcRetentionMs: number;
  now?: () => number;
}

export interface ListQuery {
  filter: TokenFilter;
  size: number;
  start: string | null;
}

export interface ListResponse {
  pagination: { page_size: number; next: string | null };
  data: TokenRecord[];
}

export interface Prepared {
  def: Definition;
  record: StoredToken;
  deduplicatedFrom: StoredToken | null;
}

const dataAad = (tenantId: string, id: string) => `${tenantId}:${id}`;
const cvcAad = (tenantId: string, id: string) => `${tenantId}:${id}:cvc`;

export class TokenService {
  private readonly now: () => number;

  constructor(
    private readonly store: TokenStore,
    private readonly crypto: VaultCrypto,
    private readonly opts: TokenServiceOptions,
  ) {
    this.now = opts.now ?? Date.now;
  }

  /** POST /tokenize: any body in, the same shape out (spec "Endpoints"). */
  async tokenize(p: Principal, body: unknown): Promise<unknown> {
    const plan = planTokenize(body, { maxDepth: this.opts.maxDepth, maxTokens: p.tenant.max_tokens_per_request, now: this.now() });
    const prepared = await this.createAll(p, plan.definitions);
    const style = plan.single ? 'mask' : 'data';
    const results = prepared.map(({ def, record, deduplicatedFrom }) => {
      const stored = deduplicatedFrom ?? record;
      if (def.plain) return stored.id;
      return createdRecord(stored, def.type === 'card' ? (def.data as CardData) : null, style, deduplicatedFrom !== null);
    });
    return assemble(body, results);
  }

  /** POST /tokens: one definition, one record (201). */
  async create(p: Principal, body: unknown): Promise<TokenRecord> {
    if (typeof body !== 'object' || body === null || Array.isArray(body) || !('type' in body) || !('data' in body)) {
      throw new ServiceError('validation_failed', { detail: 'The body must be a token definition with type and data', errors: { type: ['required'], data: ['required'] } });
    }
    const plan = planTokenize(body, { maxDepth: this.opts.maxDepth, maxTokens: 1, now: this.now() });
    const [one] = await this.createAll(p, plan.definitions);
    const { def, record, deduplicatedFrom } = one!;
    return createdRecord(deduplicatedFrom ?? record, def.type === 'card' ? (def.data as CardData) : null, 'mask', deduplicatedFrom !== null);
  }

  /** Creates every definition or none. Exposed for reactors and proxy transforms. */
  async createAll(p: Principal, defs: Definition[]): Promise<Prepared[]> {
    const prepared = await this.prepareAll(p, defs);
    await this.commit(prepared);
    return prepared;
  }

  /**
   * Validates, seals and assigns ids to every definition, writing nothing: a caller that runs
   * several steps (the proxy's request transforms) prepares each and commits them all at once.
   * Throws validation_failed (naming every bad field) when any definition is invalid.
   */
  async prepareAll(p: Principal, defs: Definition[]): Promise<Prepared[]> {
    for (const def of defs) this.authorize(p, 'token:create', def.container);
    const now = this.now();
    const createdAt = new Date(now).toISOString();
    const errors: FieldErrors = {};
    const prepared: Prepared[] = [];
    const seenIds = new Set<string>();
    const batchByFingerprint = new Map<string, StoredToken>();
    for (const def of defs) {
      const id = def.id ?? randomUUID();
      if (seenIds.has(id)) throw new ServiceError('token_conflict', { detail: 'Two definitions in the request use the same id' });
      seenIds.add(id);
      const record = this.buildRecord(p, def, id, createdAt, now, errors);
      if (!record) continue;
      let deduplicatedFrom: StoredToken | null = null;
      if (def.deduplicate && record.fingerprint !== null) {
        const k = `${def.type}\u0000${record.fingerprint}`;
        deduplicatedFrom = batchByFingerprint.get(k) ?? (await this.guard(() => this.store.findByFingerprint(p.tenant.id, def.type, record.fingerprint!)));
        if (!deduplicatedFrom) batchByFingerprint.set(k, record);
      }
      prepared.push({ def, record, deduplicatedFrom });
    }
    if (Object.keys(errors).length > 0) {
      throw new ServiceError('validation_failed', { detail: 'One or more token definitions are invalid; no token was created', errors });
    }
    return prepared;
  }

  /** Writes prepared tokens in one all-or-nothing batch (deduplicated ones are not written again). */
  async commit(prepared: readonly Prepared[]): Promise<void> {
    const toWrite = prepared.filter((x) => x.deduplicatedFrom === null).map((x) => x.record);
    if (toWrite.length > 0) {
      try {
        await this.guard(() => this.store.insertMany(toWrite));
      } catch (err) {
        if (err instanceof DuplicateTokenError) throw new ServiceError('token_conflict', { detail: 'A token with this id already exists; no token was created' });
        throw err;
      }
    }
  }

  private buildRecord(p: Principal, def: Definition, id: string, createdAt: string, now: number, errors: FieldErrors): StoredToken | null {
    const tenantId = p.tenant.id;
    let fingerprint: string | null = null;
    const index_hashes: string[] = [];
    try {
      if (def.fingerprint_expression !== null) {
        fingerprint = this.crypto.fingerprint(tenantId, def.type, renderExpression(def.fingerprint_expression, def.data));
      }
      for (const expr of def.search_indexes) {
        const v = renderExpression(expr, def.data);
        if (v !== '') index_hashes.push(this.crypto.indexHash(tenantId, v));
      }
    } catch (err) {
      if (!(err instanceof ExpressionError)) throw err;
      (errors[at(def.path, 'search_indexes')] ??= []).push(err.message);
      return null;
    }
    let plain: string | CardData = def.data;
    let cvc_sealed: string | null = null;
    let cvc_expires_at: string | null = null;
    if (def.type === 'card') {
      const { cvc, ...rest } = def.data as CardData;
      plain = rest;
      if (cvc !== undefined && this.opts.cvcRetentionMs > 0) {
        cvc_sealed = this.crypto.seal(cvc, cvcAad(tenantId, id));
        cvc_expires_at = new Date(now + this.opts.cvcRetentionMs).toISOString();
      }
    }
    return {
      tenant_id: tenantId, id, type: def.type, container: def.container,
      sealed: this.crypto.seal(JSON.stringify(plain), dataAad(tenantId, id)),
      cvc_sealed, cvc_expires_at, metadata: def.metadata, search_indexes: def.search_indexes, index_hashes,
      fingerprint, fingerprint_expression: def.fingerprint_expression, mask: def.mask,
      created_by: p.app.id, created_at: createdAt, modified_by: null, modified_at: null, expires_at: def.expires_at,
    };
  }

  /** GET /tokens/{id}: the read rule's transform applies; other tenants' tokens are 404. */
  async read(p: Principal, id: string): Promise<TokenRecord> {
    const t = await this.guard(() => this.store.get(p.tenant.id, id));
    if (!t) throw new ServiceError('not_found', { detail: 'No token with this id' });
    return await this.shape(t, this.authorize(p, 'token:read', t.container));
  }

  /** PATCH /tokens/{id} (RFC 7396 merge patch). */
  async update(p: Principal, id: string, patch: unknown): Promise<TokenRecord> {
    const t = await this.guard(() => this.store.get(p.tenant.id, id));
    if (!t) throw new ServiceError('not_found', { detail: 'No token with this id' });
    this.authorize(p, 'token:update', t.container);
    const current = await this.plaintext(t);
    const next = applyPatch(t, current, patch, this.now());
    const errors: FieldErrors = {};
    const record = this.buildRecord(p, next.def, t.id, t.created_at, this.now(), errors);
    if (!record) throw new ServiceError('validation_failed', { detail: 'The patch is invalid; the token is unchanged', errors });
    if (next.keepCvc) {
      record.cvc_sealed = t.cvc_sealed;
      record.cvc_expires_at = t.cvc_expires_at;
    }
    record.created_by = t.created_by;
    record.modified_by = p.app.id;
    record.modified_at = new Date(this.now()).toISOString();
    if (!(await this.guard(() => this.store.update(record)))) throw new ServiceError('not_found', { detail: 'No token with this id' });
    const readGrant = grant(p.app, 'token:read', record.container) ?? 'redact';
    return await this.shape(record, readGrant);
  }

  async remove(p: Principal, id: string): Promise<void> {
    const t = await this.guard(() => this.store.get(p.tenant.id, id));
    if (!t) throw new ServiceError('not_found', { detail: 'No token with this id' });
    this.authorize(p, 'token:delete', t.container);
    await this.guard(() => this.store.delete(p.tenant.id, id));
  }

  /** GET /tokens: filters as given. */
  async list(p: Principal, q: ListQuery): Promise<ListResponse> {
    const page = await this.guard(() => this.store.list(p.tenant.id, q.filter, { size: q.size, after: q.start }));
    const data: TokenRecord[] = [];
    for (const t of page.items) {
      // Tokens in containers this key may not search are left out of its pages.
      if (grant(p.app, 'token:search', t.container) === null) continue;
      data.push(await this.shape(t, grant(p.app, 'token:read', t.container) ?? 'redact'));
    }
    return { pagination: { page_size: q.size, next: page.next }, data };
  }

  /** POST/GET /tokens/search: the query language of vault/search.ts. */
  async search(p: Principal, query: string, size: number, start: string | null): Promise<ListResponse> {
    const parsed = parseQuery(query);
    const filter: TokenFilter = {};
    if (parsed.type !== undefined) filter.type = parsed.type;
    if (parsed.container !== undefined) filter.container = parsed.container;
    if (parsed.fingerprint !== undefined) filter.fingerprint = parsed.fingerprint;
    if (parsed.ids) filter.ids = parsed.ids;
    if (Object.keys(parsed.metadata).length > 0) filter.metadata = parsed.metadata;
    if (parsed.data.length > 0) filter.index_hashes = parsed.data.map((v) => this.crypto.indexHash(p.tenant.id, v));
    return this.list(p, { filter, size, start });
  }

  /** Unsealed data of a stored token (cvc excluded). */
  async plaintext(t: StoredToken): Promise<string | CardData> {
    const json = await this.crypto.unsealOrRefresh(t.sealed, dataAad(t.tenant_id, t.id));
    return JSON.parse(json) as string | CardData;
  }

  private async shape(t: StoredToken, transform: Transform): Promise<TokenRecord> {
    return readRecord(t, transform, needsPlaintext(t, transform) ? await this.plaintext(t) : null);
  }

  private authorize(p: Principal, permission: Permission, container: string): Transform {
    const g = grant(p.app, permission, container);
    if (g === null) throw new ServiceError('forbidden', { detail: `The key lacks ${permission} on container ${container}` });
    return g;
  }

  /** Store failures become 503 store_unavailable; everything else passes. */
  private async guard<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof StoreUnavailableError) throw new ServiceError('store_unavailable', { cause: err });
      if (err instanceof InvalidCursorError) throw new ServiceError('invalid_cursor', { detail: 'Pass the pagination.next value of a previous page as start' });
      throw err;
    }
  }
}

