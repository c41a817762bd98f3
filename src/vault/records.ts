/**
 * Token records as they leave the service. The shapes are the spec's ("Token (output record)"):
 * a card's masked fields go under `mask` in a response to a single definition and under `data`
 * in array and composite responses; a `token` record never carries its value; the cvc never
 * appears. Reads apply the access rule's transform: reveal, mask or redact.
 */
import type { Transform } from '../auth/access.js';
import type { Logger } from '../log.js';
import type { StoredToken } from '../store/types.js';
import { maskedCard, revealedCard, type CardData } from './card.js';
import type { TokenData } from './definition.js';
import { storedType } from './token-types.js';
import { ExpressionError, renderExpression } from './expressions.js';

export type TokenRecord = Record<string, unknown>;

/** Fields every record carries, in a stable order. */
function base(t: StoredToken): TokenRecord {
  const r: TokenRecord = { id: t.id, tenant_id: t.tenant_id, type: t.type, containers: [t.container] };
  return r;
}

/** `showFingerprint`: fingerprints are shown only to keys that may read the token (auth/access.ts). */
function tail(t: StoredToken, r: TokenRecord, showFingerprint: boolean): TokenRecord {
  if (Object.keys(t.metadata).length > 0) r.metadata = t.metadata;
  if (t.search_indexes.length > 0) r.search_indexes = t.search_indexes;
  if (t.fingerprint_expression !== null) r.fingerprint_expression = t.fingerprint_expression;
  if (t.fingerprint !== null && showFingerprint) r.fingerprint = t.fingerprint;
  if (t.mask !== null) r.mask = t.mask;
  if (t.expires_at !== null) r.expires_at = t.expires_at;
  r.created_by = t.created_by;
  r.created_at = t.created_at;
  if (t.modified_at !== null) {
    r.modified_by = t.modified_by;
    r.modified_at = t.modified_at;
  }
  return r;
}

/**
 * A record in a tokenize / create response. `card` is the plaintext card (for its mask);
 * `style` says where the masked fields go.
 */
export function createdRecord(t: StoredToken, card: CardData | null, style: 'mask' | 'data', deduplicated: boolean, showFingerprint: boolean): TokenRecord {
  const r = base(t);
  if (card) r[style] = maskedCard(card);
  tail(t, r, showFingerprint);
  if (deduplicated) r._extras = { deduplicated: true };
  return r;
}

/**
 * A record in a read, list or search response. `plaintext` is the unsealed data (null when
 * redacted). A mask that fails to render (or yields more than 4 KB) gives no data for this token,
 * logged without values, never an error for the whole answer: masks are tried when written, so
 * this is a token stored before that rule or a render that hit a limit.
 */
export function readRecord(t: StoredToken, transform: Transform, plaintext: TokenData | null, showFingerprint: boolean, log?: Logger): TokenRecord {
  const r = base(t);
  if (transform !== 'redact' && plaintext !== null) {
    if (t.type === 'card') {
      r.data = transform === 'reveal' ? revealedCard(plaintext as CardData) : maskedCard(plaintext as CardData);
    } else if (transform === 'reveal') {
      r.data = plaintext;
    } else if (t.mask === null) {
      // The type's own mask: e.g. an SSN reads XXX-XX-6789; a `token` shows nothing.
      const masked = storedType(t.type).mask(plaintext);
      if (masked !== undefined) r.data = masked;
    } else {
      try {
        // Over the budget's view: a mask of a card number can show its first 6 and last 4
        // digits at most, whatever the expression (src/vault/token-types.ts).
        r.data = renderExpression(t.mask, storedType(t.type).view(plaintext));
      } catch (err) {
        if (!(err instanceof ExpressionError)) throw err;
        log?.warn({ token_id: t.id, reason: err.message }, 'token mask could not be rendered; the token is shown without data');
      }
    }
  }
  return tail(t, r, showFingerprint);
}

/** Whether reading `t` with `transform` needs its plaintext. */
export function needsPlaintext(t: StoredToken, transform: Transform): boolean {
  if (transform === 'reveal') return true;
  if (transform === 'mask') return t.type !== 'token' || t.mask !== null;
  return false;
}
