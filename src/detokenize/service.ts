/**
 * Detokenization (docs/detokenization.md "Detokenization"): resolves the token ids that expressions name
 * (detokenize/expressions.ts) into the tokens a caller may see, checks every permission before
 * anything is decrypted, and appends the audit event before it returns anything.
 *
 * - Use (the outbound proxy, the proxies' `detokenize` transform, reactor args): `token:use` on
 *   each token's container through the key's access rules; the whole token in plaintext.
 * - Read (POST /detokenize): `token:read` on each token's container; the rule's transform
 *   applies (reveal: plaintext, mask: masked data, redact: 403).
 * All or nothing: an id that names no live token of the caller's tenant (unknown, expired,
 * deleted, another tenant's) is 400 unknown_token, a token the key may not use or read is 403,
 * and either fails the whole request before any value is decrypted, audited or returned.
 * Errors never name the ids (an "id" may be a card number pasted into an expression).
 *
 * `token:use` is a right to send, not to learn: for a token the key may not read with
 * `reveal`, its expressions may use only the filters access.computeFilters allows (403 with a
 * fixed detail, before anything is decrypted), and Resolved.detailed is false, so every failure
 * after the values were put in is one uniform problem (expressions.ts valueRefused).
 */
import * as access from '../auth/access.js';
import type { Principal } from '../auth/keys.js';
import { ServiceError } from '../errors.js';
import type { Logger } from '../log.js';
import type { AuditTrail } from '../audit/trail.js';
import type { AuditAction } from '../store/audit.js';
import type { StoredToken, TokenPort } from '../store/types.js';
import { readRecord } from '../vault/records.js';
import type { TokenService } from '../vault/service.js';
import type { DetokenizedToken, ExpressionUses, Resolved } from './expressions.js';

export type { DetokenizedToken, ExpressionUses, Resolved };

export interface UseAudit {
  action: 'proxy.outbound' | 'proxy.detokenize' | 'reactor.args';
  /** The destination's origin (scheme://host[:port]); anything beyond the origin is dropped. */
  destination?: string;
  requestId: string;
}

export interface DetokenizerOptions {
  /** Where the events go (anchored, heads logged): audit/trail.ts. */
  audit: AuditTrail;
  now?: () => number;
  log?: Logger;
}

/** The origin of a destination URL, or null when there is none or it does not parse. */
function originOf(destination: string | undefined): string | null {
  if (destination === undefined) return null;
  try {
    const origin = new URL(destination).origin;
    return origin === 'null' ? null : origin;
  } catch {
    return null;
  }
}

/**
 * 403 when an expression over a token uses a filter the key may not use on it, before
 * anything is decrypted. The detail is fixed: it names no filter, argument or id.
 */
function checkFilters(p: Principal, records: readonly StoredToken[], uses: ExpressionUses): void {
  for (const t of records) {
    const allowed = access.computeFilters(p.app, t.container);
    if (allowed === 'all') continue;
    for (const name of uses.filtersOf(t.id)) {
      if (!allowed.has(name)) {
        throw new ServiceError('forbidden', {
          detail: 'Without token:read reveal on a token, its expressions may use only json, slice, last4, reveal_last, reveal_first, append, prepend, upcase and downcase; nothing was done',
        });
      }
    }
  }
}

/** Whether the key reads every token with reveal: then failures after rendering may say what failed. */
function revealsAll(p: Principal, records: readonly StoredToken[]): boolean {
  return records.every((t) => access.grant(p.app, 'token:read', t.container) === 'reveal');
}

export class Detokenizer {
  private readonly now: () => number;

  constructor(
    private readonly store: TokenPort,
    private readonly tokens: TokenService,
    private readonly opts: DetokenizerOptions,
  ) {
    this.now = opts.now ?? Date.now;
  }

  /**
   * The tokens `uses` names, in plaintext, for use inside the service: checks token:use and the
   * filters on every one, then writes the audit event, then returns. Throws (400 unknown_token,
   * 403 forbidden, 503 store_unavailable) before returning anything when any check or the audit
   * write fails.
   */
  async resolveForUse(p: Principal, uses: ExpressionUses, audit: UseAudit): Promise<Resolved> {
    const out = new Map<string, DetokenizedToken>();
    if (uses.ids.length === 0) return { tokens: out, detailed: true };
    const records = await this.fetch(p, uses.ids);
    for (const t of records) {
      if (access.grant(p.app, 'token:use', t.container) === null) {
        throw new ServiceError('forbidden', { detail: 'The key lacks token:use on the container of a token named in the request; nothing was sent' });
      }
    }
    checkFilters(p, records, uses);
    for (const t of records) out.set(t.id, await this.view(p, t, 'reveal', true));
    await this.append(p, audit.action, records.map((t) => t.id), originOf(audit.destination), audit.requestId);
    return { tokens: out, detailed: revealsAll(p, records) };
  }

  /**
   * The tokens `uses` names as POST /detokenize shows them: token:read on every one, each through
   * its rule's transform (reveal: plaintext, mask: masked, redact: 403), and the filters.
   * Audited as token.detokenize before it returns.
   */
  async resolveForRead(p: Principal, uses: ExpressionUses, ctx: { requestId: string; log?: Logger }): Promise<Resolved> {
    const out = new Map<string, DetokenizedToken>();
    if (uses.ids.length === 0) return { tokens: out, detailed: true };
    const records = await this.fetch(p, uses.ids);
    const transforms = records.map((t) => {
      const g = access.grant(p.app, 'token:read', t.container);
      if (g === null || g === 'redact') {
        throw new ServiceError('forbidden', { detail: 'The key may not read the data of a token named in the request' });
      }
      return g;
    });
    checkFilters(p, records, uses);
    for (let i = 0; i < records.length; i++) out.set(records[i]!.id, await this.view(p, records[i]!, transforms[i]!, false, ctx.log));
    await this.append(p, 'token.detokenize', records.map((t) => t.id), null, ctx.requestId);
    return { tokens: out, detailed: revealsAll(p, records) };
  }

  /** Live tokens of the caller's tenant for every id, or 400 unknown_token. */
  private async fetch(p: Principal, ids: readonly string[]): Promise<StoredToken[]> {
    const unique = [...new Set(ids)];
    const found = await this.store.getMany(p.tenant.id, unique);
    if (found.length !== unique.length) {
      const missing = unique.length - found.length;
      throw new ServiceError('unknown_token', {
        detail: `${missing} token id(s) in the request name no token of this tenant (unknown, expired or deleted); nothing was done`,
      });
    }
    return found;
  }

  /**
   * The token as an expression sees it: the read record for the transform; for a use, a card's
   * data also carries its cvc while the retention window keeps it.
   */
  private async view(p: Principal, t: StoredToken, transform: access.Transform, withCvc: boolean, log?: Logger): Promise<DetokenizedToken> {
    const plaintext = transform === 'redact' ? null : await this.tokens.plaintext(t);
    const record = readRecord(t, transform, plaintext, access.showsFingerprint(p.app, t.container), log ?? this.opts.log);
    const view = { ...record, id: t.id, type: t.type, data: record.data ?? null } as DetokenizedToken;
    if (withCvc && t.type === 'card' && t.cvc_sealed !== null) {
      const cvc = await this.tokens.cvc(t);
      if (cvc !== null && typeof view.data === 'object' && view.data !== null) view.data = { ...(view.data as object), cvc };
    }
    return view;
  }

  private async append(p: Principal, action: AuditAction, ids: string[], destination: string | null, requestId: string): Promise<void> {
    await this.opts.audit.append(p.tenant.id, [{
      tenant_id: p.tenant.id, application_id: p.app.id, action, token_ids: ids, destination, request_id: requestId,
      created_at: new Date(this.now()).toISOString(),
    }]);
  }
}
