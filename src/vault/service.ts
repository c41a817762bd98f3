/**
 * The token service: tokenize, create, read, update, delete, list and search. It plans and
 * validates everything first (pure modules), then seals, then writes one all-or-nothing batch.
 * Plaintext lives only in this process's memory between the request and the seal.
 *
 * Every access decision is auth/access.ts's: which transform a read gets, whether a PATCH may
 * change expressions, whether deduplication may match, whether a fingerprint is shown or may be
 * matched, and which containers a page may show (passed to the store as part of its query).
 */
import { randomUUID } from 'node:crypto';
import * as access from '../auth/access.js';
import type { Principal } from '../auth/keys.js';
import { ServiceError, type FieldErrors } from '../errors.js';
import type { Logger } from '../log.js';
import type { VaultMetrics } from './metrics.js';
import type { AuditTrail } from '../audit/trail.js';
import { DuplicateTokenError, type StoredToken, type TokenFilter, type TokenPort } from '../store/types.js';
import type { CardData } from './card.js';
import { addFieldError, at, TOKEN_TYPES, type Definition, type TokenData } from './definition.js';
import { drawAlias, type AliasSpec } from './alias.js';
import { ExpressionError, renderExpression } from './expressions.js';
import { storedType } from './token-types.js';
import { createdRecord, needsPlaintext, readRecord, type TokenRecord } from './records.js';
import { parseQuery } from './search.js';
import { assemble, planTokenize } from './walk.js';
import { applyPatch } from './patch.js';

/** How many aliases are drawn before a create gives up with 409. */
const ALIAS_DRAWS = 20;

/** A sealed value this long (about 1 MB) took milliseconds to make: the next step waits a turn. */
const LARGE_VALUE = 1 << 20;
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** What the vault needs from the crypto layer (crypto/keyring.ts implements it). */
export interface VaultCrypto {
  seal(plaintext: string, aad: string): string;
  /** Opens a sealed value; reloads the key ring once when another instance rotated in a new key. */
  unsealOrRefresh(sealed: string, aad: string): Promise<string>;
  fingerprint(tenantId: string, type: string, value: string): string;
  indexHash(tenantId: string, value: string): string;
  /** Seals a store cursor for a client, bound to the tenant and `context` (the query it pages). */
  sealCursor(tenantId: string, payload: string, context: string): string;
  /** The store cursor inside a sealed one, or null when it was not sealed for this tenant and context. */
  openCursor(tenantId: string, cursor: string, context: string): string | null;
}

/**
 * What a page cursor is bound to: the filter as the store runs it, the key's scope included, in
 * one canonical form (metadata pairs sorted), so a cursor opens only the query that made it.
 */
function cursorContext(filter: TokenFilter): string {
  const metadata = filter.metadata ? Object.entries(filter.metadata).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)) : null;
  return JSON.stringify([
    'tokens/v1', filter.type ?? null, filter.container ?? null, filter.fingerprint ?? null, metadata,
    filter.index_hashes ?? null, filter.ids ?? null, filter.scope ?? null,
  ]);
}

export interface TokenServiceOptions {
  maxDepth: number;
  cvcRetentionMs: number;
  now?: () => number;
  /** Where a mask that fails at read time is reported when the caller passes no request logger. */
  log?: Logger;
  /** Counts reveals (docs/operations.md "Metrics"). */
  metrics?: VaultMetrics;
  /**
   * Where every reveal is recorded: each read, list, search or
   * update answer that carries plaintext under a reveal rule appends one `token.reveal` event
   * before it returns, so no route decides whether something was a reveal.
   */
  audit?: Pick<AuditTrail, 'append'>;
}

/** The request a read serves: its trace id names the audit event; its logger gets mask failures. */
export interface ReadRequest {
  requestId: string;
  log?: Logger;
}

/** The tokens one answer revealed (filled by shape, appended to the audit trail by the caller). */
type Reveals = string[];

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
  /** Whether commit deduplicates it: the definition asks, and the key may read its container. */
  dedupe: boolean;
  /**
   * Set by commit: the existing token the store returned instead of writing `record`, or null.
   * Only a `dedupe` entry can get one, so the ids of the others are final before commit.
   */
  deduplicatedFrom: StoredToken | null;
}

const dataAad = (tenantId: string, id: string) => `${tenantId}:${id}`;
const cvcAad = (tenantId: string, id: string) => `${tenantId}:${id}:cvc`;

export class TokenService {
  private readonly now: () => number;

  constructor(
    private readonly store: TokenPort,
    private readonly crypto: VaultCrypto,
    private readonly opts: TokenServiceOptions,
  ) {
    this.now = opts.now ?? Date.now;
  }

  /**
   * POST /tokenize: any body in, the same shape out (spec "Endpoints"). `origin` says whether the
   * caller sent the values in the clear; it decides which templates may run over them
   * (auth/access.ts templatePolicy).
   */
  async tokenize(p: Principal, body: unknown, origin: access.ValueOrigin = 'clear'): Promise<unknown> {
    const templates = access.templatePolicy(p.app, origin);
    if (templates === 'none') {
      throw new ServiceError('expression_not_allowed', {
        detail: 'Values computed from tokens this key may use but not read (token:read reveal) cannot be tokenized: what is tokenized from them would show them; nothing was created',
      });
    }
    const plan = planTokenize(body, { maxDepth: this.opts.maxDepth, maxTokens: p.tenant.max_tokens_per_request, now: this.now(), templates });
    const prepared = await this.createAll(p, plan.definitions);
    const style = plan.single ? 'mask' : 'data';
    const results = prepared.map(({ def, record, deduplicatedFrom }) => {
      const stored = deduplicatedFrom ?? record;
      if (def.plain) return stored.id;
      const card = def.type === 'card' ? (def.data as CardData) : null;
      return createdRecord(stored, card, style, deduplicatedFrom !== null, access.showsFingerprint(p.app, stored.container));
    });
    return assemble(body, results);
  }

  /** POST /tokens: one definition, one record (201). */
  async create(p: Principal, body: unknown): Promise<TokenRecord> {
    // only what is missing is named ({"data": "x"} lacks `type`, not `data`).
    const object = typeof body === 'object' && body !== null && !Array.isArray(body);
    const missing = (['type', 'data'] as const).filter((k) => !object || !(k in body));
    if (missing.length > 0) {
      throw new ServiceError('validation_failed', {
        detail: missing.length === 2
          ? 'The body must be a token definition with type and data'
          : missing[0] === 'type'
            ? `The token definition has no type (one of: ${TOKEN_TYPES.join(', ')})`
            : 'The token definition has no data',
        errors: Object.fromEntries(missing.map((k) => [k, ['required']])),
      });
    }
    const plan = planTokenize(body, { maxDepth: this.opts.maxDepth, maxTokens: 1, now: this.now(), templates: access.templatePolicy(p.app, 'clear') });
    const [one] = await this.createAll(p, plan.definitions);
    const { def, record, deduplicatedFrom } = one!;
    const stored = deduplicatedFrom ?? record;
    const card = def.type === 'card' ? (def.data as CardData) : null;
    return createdRecord(stored, card, 'mask', deduplicatedFrom !== null, access.showsFingerprint(p.app, stored.container));
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
   * Throws validation_failed (naming every bad field) when any definition is invalid, 403 when the
   * key may not create in a definition's container.
   */
  async prepareAll(p: Principal, defs: Definition[]): Promise<Prepared[]> {
    for (const def of defs) access.requireGrant(p.app, 'token:create', def.container);
    const now = this.now();
    const createdAt = new Date(now).toISOString();
    const errors: FieldErrors = {};
    const prepared: Prepared[] = [];
    const seenIds = new Set<string>();
    for (const def of defs) {
      const id = def.alias ? await this.drawAliasId(p.tenant.id, def, def.alias, seenIds) : (def.id ?? randomUUID());
      if (seenIds.has(id)) throw new ServiceError('token_conflict', { detail: 'Two definitions in the request use the same id' });
      seenIds.add(id);
      const record = this.buildRecord(p, def, id, createdAt, now, errors);
      if (!record) continue;
      // A large value took tens of milliseconds to seal: let other requests run before the next
      // step (a 5 MB string held the event loop 130-240 ms in one stretch; event-loop.test).
      if (record.sealed.length > LARGE_VALUE) await nextTurn();
      // Deduplication matches only tokens the caller could read; otherwise a new token is created.
      const dedupe = def.deduplicate && record.fingerprint !== null && access.mayDeduplicate(p.app, def.container);
      prepared.push({ def, record, dedupe, deduplicatedFrom: null });
    }
    if (Object.keys(errors).length > 0) {
      throw new ServiceError('validation_failed', { detail: 'One or more token definitions are invalid; no token was created', errors });
    }
    return prepared;
  }

  /**
   * An alias id: drawn until it names no token of the tenant and no other definition of
   * the request, at most ALIAS_DRAWS times, then 409 token_conflict (a nearly full alias space,
   * e.g. a 13-digit card's 100 aliases). A token written between the check and the insert with
   * the same alias makes the insert a conflict, 409 as for any id.
   */
  private async drawAliasId(tenantId: string, def: Definition, spec: AliasSpec, taken: ReadonlySet<string>): Promise<string> {
    const value = def.type === 'card' ? (def.data as CardData).number : (def.data as string);
    for (let i = 0; i < ALIAS_DRAWS; i++) {
      const candidate = drawAlias(spec, value);
      if (!taken.has(candidate) && (await this.store.get(tenantId, candidate)) === null) return candidate;
    }
    throw new ServiceError('token_conflict', { detail: `No free alias after ${ALIAS_DRAWS} draws: the alias leaves too few characters to draw; no token was created` });
  }

  /**
   * Writes prepared tokens in one all-or-nothing batch. A `dedupe` entry whose tenant, type,
   * container and fingerprint match a live token (or an earlier entry of the batch) is not
   * written: the store returns that token in the same atomic step, and it lands in
   * `deduplicatedFrom`.
   */
  async commit(prepared: readonly Prepared[]): Promise<void> {
    if (prepared.length === 0) return;
    if (prepared.some((x) => x.record.sealed.length > LARGE_VALUE)) await nextTurn();
    let results: Array<StoredToken | null>;
    try {
      results = await this.store.insertMany(prepared.map((x) => x.record), { dedupe: prepared.map((x) => x.dedupe) });
    } catch (err) {
      if (err instanceof DuplicateTokenError) throw new ServiceError('token_conflict', { detail: 'A token with this id already exists; no token was created' });
      throw err;
    }
    prepared.forEach((x, i) => {
      x.deduplicatedFrom = x.dedupe ? (results[i] ?? null) : null;
    });
  }

  /**
   * The stored form of a definition. Every expression is tried on the token's own data here:
   * one that fails, or yields more than 4 KB, is a validation error on its field.
   */
  private buildRecord(p: Principal, def: Definition, id: string, createdAt: string, now: number, errors: FieldErrors): StoredToken | null {
    const tenantId = p.tenant.id;
    let fingerprint: string | null = null;
    const index_hashes: string[] = [];
    let ok = true;
    const attempt = (field: string, fn: () => void): void => {
      try {
        fn();
      } catch (err) {
        if (!(err instanceof ExpressionError)) throw err;
        addFieldError(errors, at(def.path, field), err.message);
        ok = false;
      }
    };
    if (def.fingerprint_expression !== null) {
      const expr = def.fingerprint_expression;
      attempt('fingerprint_expression', () => {
        fingerprint = this.crypto.fingerprint(tenantId, def.type, renderExpression(expr, def.data));
      });
    }
    def.search_indexes.forEach((expr, i) => {
      attempt(`search_indexes[${i}]`, () => {
        const v = renderExpression(expr, def.data);
        if (v !== '') index_hashes.push(this.crypto.indexHash(tenantId, v));
      });
    });
    if (def.mask !== null) {
      const expr = def.mask;
      // Rendered over the budget's view, as every read renders it (vault/records.ts).
      attempt('mask', () => void renderExpression(expr, storedType(def.type).view(def.data)));
    }
    if (!ok) return null;
    let plain: TokenData = def.data;
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
  async read(p: Principal, id: string, req: ReadRequest): Promise<TokenRecord> {
    const t = await this.store.get(p.tenant.id, id);
    if (!t) throw new ServiceError('not_found', { detail: 'No token with this id' });
    const reveals: Reveals = [];
    const record = await this.shape(p, t, access.requireGrant(p.app, 'token:read', t.container), req.log, reveals);
    await this.audit(p, reveals, req);
    return record;
  }

  /**
   * PATCH /tokens/{id} (RFC 7396 merge patch). Changing an expression without supplying the
   * token's whole data is a read of it: 403 unless the key reads the container with reveal,
   * checked before any expression is tried on the data.
   */
  async update(p: Principal, id: string, patch: unknown, req: ReadRequest): Promise<TokenRecord> {
    const t = await this.store.get(p.tenant.id, id);
    if (!t) throw new ServiceError('not_found', { detail: 'No token with this id' });
    access.requireGrant(p.app, 'token:update', t.container);
    const current = await this.plaintext(t);
    const next = applyPatch(t, current, patch, this.now());
    if (next.changedExpressions.length > 0 && access.templatePolicy(p.app, 'clear') === 'named') {
      throw new ServiceError('expression_not_allowed', {
        detail: `This key may not set ${next.changedExpressions.join(', ')}: its values may come from a hosted field; the token is unchanged`,
      });
    }
    access.requireExpressionWrite(p.app, t.container, next.changedExpressions, next.suppliesData);
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
    if (!(await this.store.update(record))) throw new ServiceError('not_found', { detail: 'No token with this id' });
    // The answer is the updated record as a read shows it: under a reveal rule, a reveal.
    const reveals: Reveals = [];
    const shown = await this.shape(p, record, access.readTransform(p.app, record.container), req.log, reveals);
    await this.audit(p, reveals, req);
    return shown;
  }

  /**
   * The record update's answer shows, for a token as it is now, writing nothing: an idempotent
   * replay of a PATCH renders its data again through the same checks. Deleted or
   * expired: 404, as a read answers.
   */
  async updatedView(p: Principal, id: string, req: ReadRequest): Promise<TokenRecord> {
    const t = await this.store.get(p.tenant.id, id);
    if (!t) throw new ServiceError('not_found', { detail: 'No token with this id' });
    access.requireGrant(p.app, 'token:update', t.container);
    const reveals: Reveals = [];
    const shown = await this.shape(p, t, access.readTransform(p.app, t.container), req.log, reveals);
    await this.audit(p, reveals, req);
    return shown;
  }

  async remove(p: Principal, id: string): Promise<void> {
    const t = await this.store.get(p.tenant.id, id);
    if (!t) throw new ServiceError('not_found', { detail: 'No token with this id' });
    access.requireGrant(p.app, 'token:delete', t.container);
    await this.store.delete(p.tenant.id, id);
  }

  /**
   * GET /tokens: filters as given, within the containers the key may search. That scope is part
   * of the store's query, so a page holds `size` records whenever that many match.
   */
  async list(p: Principal, q: ListQuery, req: ReadRequest): Promise<ListResponse> {
    // A fingerprint filter matches only tokens whose fingerprint the key may see.
    const byFingerprint = q.filter.fingerprint !== undefined;
    const filter: TokenFilter = { ...q.filter, scope: byFingerprint ? access.fingerprintScope(p.app) : access.searchScope(p.app) };
    if (filter.scope === undefined) delete filter.scope;
    // Cursors are sealed: the store's own cursor (a sequence shared by every tenant on
    // the embedded store) never reaches the client, and one not sealed for this tenant and query
    // is 400 invalid_cursor.
    const context = cursorContext(filter);
    const after = q.start === null ? null : this.crypto.openCursor(p.tenant.id, q.start, context);
    if (q.start !== null && after === null) throw new ServiceError('invalid_cursor', { detail: 'Pass the pagination.next value of a previous page of the same query as start' });
    const page = await this.store.list(p.tenant.id, filter, { size: q.size, after });
    const data: TokenRecord[] = [];
    const reveals: Reveals = [];
    for (const t of page.items) {
      // The store applied the scope; a record outside it would be a store bug, never shown.
      if (access.grant(p.app, 'token:search', t.container) === null) continue;
      if (byFingerprint && !access.showsFingerprint(p.app, t.container)) continue;
      data.push(await this.shape(p, t, access.readTransform(p.app, t.container), req.log, reveals));
    }
    await this.audit(p, reveals, req);
    const next = page.next === null ? null : this.crypto.sealCursor(p.tenant.id, page.next, context);
    return { pagination: { page_size: q.size, next }, data };
  }

  /** POST/GET /tokens/search: the query language of vault/search.ts. */
  async search(p: Principal, query: string, size: number, start: string | null, req: ReadRequest): Promise<ListResponse> {
    const parsed = parseQuery(query);
    const filter: TokenFilter = {};
    if (parsed.type !== undefined) filter.type = parsed.type;
    if (parsed.container !== undefined) filter.container = parsed.container;
    if (parsed.fingerprint !== undefined) filter.fingerprint = parsed.fingerprint;
    if (parsed.ids) filter.ids = parsed.ids;
    if (Object.keys(parsed.metadata).length > 0) filter.metadata = parsed.metadata;
    if (parsed.data.length > 0) filter.index_hashes = parsed.data.map((v) => this.crypto.indexHash(p.tenant.id, v));
    return this.list(p, { filter, size, start }, req);
  }

  /** Unsealed data of a stored token (cvc excluded). */
  async plaintext(t: StoredToken): Promise<TokenData> {
    const json = await this.crypto.unsealOrRefresh(t.sealed, dataAad(t.tenant_id, t.id));
    return JSON.parse(json) as TokenData;
  }

  /** The unsealed cvc of a card while its retention window keeps it, else null (never shown by reads). */
  async cvc(t: StoredToken): Promise<string | null> {
    return t.cvc_sealed === null ? null : await this.crypto.unsealOrRefresh(t.cvc_sealed, cvcAad(t.tenant_id, t.id));
  }

  /** The token as `transform` shows it; a reveal is counted and its id added to `reveals`. */
  private async shape(p: Principal, t: StoredToken, transform: access.Transform, log: Logger | undefined, reveals: Reveals): Promise<TokenRecord> {
    const plaintext = needsPlaintext(t, transform) ? await this.plaintext(t) : null;
    const record = readRecord(t, transform, plaintext, access.showsFingerprint(p.app, t.container), log ?? this.opts.log);
    if (transform === 'reveal') this.opts.metrics?.revealed(t.type);
    if (transform === 'reveal' && record.data !== undefined) reveals.push(t.id);
    return record;
  }

  /**
   * One `token.reveal` event for the tokens an answer reveals, appended before the answer leaves
   * (docs/detokenization.md "Audit trail"): if it cannot be written, the request fails with 503 and nothing is
   * shown.
   */
  private async audit(p: Principal, reveals: Reveals, req: ReadRequest): Promise<void> {
    if (reveals.length === 0 || !this.opts.audit) return;
    const audit = this.opts.audit;
    await audit.append(p.tenant.id, [{
      tenant_id: p.tenant.id, application_id: p.app.id, action: 'token.reveal', token_ids: reveals, destination: null,
      request_id: req.requestId, created_at: new Date(this.now()).toISOString(),
    }]);
  }
}

