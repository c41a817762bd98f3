/**
 * What a caller observes of an answer, made comparable between two requests that differ only in
 * the value (disclosure-suite.ts): status, the headers that are not per-request (date, trace id,
 * rate-limit counters), and the body with what differs by design replaced: token ids by their
 * shape (an alias id with its drawn characters as `*`, a random id as `<uuid>`, an id the test
 * chose as `<plain>`, the named token as `<victim>`), times as `<time>`, fingerprints (keyed
 * hashes) as `<fp>`. Everything else (codes, details, field error paths and messages, masks,
 * lengths, content-length) is compared as it is.
 */
import { maskDrawn, type IdKind, type Value, overBudget } from './disclosure-grammar.js';

export type Answer = { status: number; headers: Headers; body: any; text: string };

const VOLATILE = /^(date|svc-trace-id|x-request-id|ratelimit.*|x-ratelimit.*|retry-after|svc-idempotent.*|keep-alive|connection)$/i;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Every `id` of a token record in a JSON answer (objects with `id` and `tenant_id`). */
export function recordIds(v: unknown, out: string[] = []): string[] {
  if (Array.isArray(v)) for (const x of v) recordIds(x, out);
  else if (typeof v === 'object' && v !== null) {
    const o = v as Record<string, unknown>;
    if (typeof o.id === 'string' && typeof o.tenant_id === 'string') out.push(o.id);
    for (const x of Object.values(o)) recordIds(x, out);
  }
  return out;
}

/** The comparable form of an id the vault made for a definition of `kind`. */
export function maskedId(id: string, kind: IdKind): string {
  if (kind && 'plain' in kind && id === kind.plain) return '<plain>';
  if (kind && 'alias' in kind) return maskDrawn(id, kind.alias);
  if (UUID.test(id)) return '<uuid>';
  return id;
}

function scrub(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(scrub);
  if (typeof v !== 'object' || v === null) return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
    if (k === 'created_at' || k === 'modified_at') out[k] = '<time>';
    else if (k === 'fingerprint') out[k] = '<fp>';
    else out[k] = scrub(x);
  }
  return out;
}

export interface Seen {
  /** The comparable observation. */
  seen: unknown;
  /** The answer as text (headers and body), ids replaced: what the budget scan reads. */
  text: string;
}

/** `ids`: raw id → replacement, applied to the whole answer before anything is compared. */
export function observe(r: Answer, ids: ReadonlyMap<string, string>): Seen {
  const swap = (s: string) => {
    for (const [raw, masked] of [...ids].sort((x, y) => y[0].length - x[0].length)) s = s.split(raw).join(masked);
    return s;
  };
  const headers: Record<string, string> = {};
  r.headers.forEach((v, k) => {
    if (!VOLATILE.test(k)) headers[k] = swap(v);
  });
  const text = swap(r.text);
  let body: unknown;
  try {
    body = scrub(JSON.parse(text));
  } catch {
    body = text;
  }
  return { seen: { status: r.status, headers, body }, text: `${JSON.stringify(headers)}\n${text}` };
}

/** The first text of `values` that goes over its budget and appears in `text`, or null. */
export function overBudgetIn(text: string, values: readonly Value[]): string | null {
  for (const v of values) for (const s of overBudget(v)) if (text.includes(s)) return s;
  return null;
}
