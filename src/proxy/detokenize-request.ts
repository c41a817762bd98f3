/**
 * Detokenizing a request on its way out (docs/detokenization.md "Outbound proxy", and the `detokenize` request
 * transform of a pre-configured proxy): the expressions in the body (JSON, form or text), in
 * header values and in the query are collected first, resolved in ONE all-or-nothing call (which
 * checks `token:use` and writes the audit event), and only then substituted. A failure anywhere
 * throws before a byte is sent. The expression syntax itself lives in src/detokenize/expressions.ts.
 *
 * every carrier of the request goes through ONE ExpressionScan (one budget of 1,000
 * expressions, one 5 MB bound on the values put in), and a header refused after substitution is,
 * for a key without reveal, the uniform detokenized_value_refused that names no header.
 */
import type { Detokenizer } from '../detokenize/service.js';
import { isUtf8 } from 'node:buffer';
import { ExpressionScan, type ExpressionUses, type Rendering, type Resolved } from '../detokenize/expressions.js';
import { ServiceError } from '../errors.js';
import type { ProxyBody } from './body.js';

/** What resolves the tokens of a request for use (detokenize/service.ts Detokenizer). */
export type UseResolver = Pick<Detokenizer, 'resolveForUse'>;

/** Resolves every id for use (permission, filters, audit), or throws: nothing is substituted then. */
export type UseTokens = (uses: ExpressionUses) => Promise<Resolved>;

export interface DetokenizedParts {
  headers: Record<string, string | string[]>;
  /** The raw query (without `?`). */
  query: string;
  /** How many distinct tokens were used (0: nothing was resolved, nothing changed). */
  used: number;
}

const OPEN = '{{';
/** Header values may not carry these after substitution (RFC 9110 §5.5; response splitting). */
const HEADER_FORBIDDEN = /[\0\r\n]/;

/** `+` as space, then percent-decoding; undefined when the escape is malformed. */
function decodeFormPart(raw: string): string | undefined {
  try {
    return decodeURIComponent(raw.replace(/\+/g, ' '));
  } catch {
    return undefined;
  }
}

function encodeFormPart(value: string): string {
  return new URLSearchParams([['', value]]).toString().slice(1);
}

interface FormPart {
  raw: string;
  /** Decoded name and value, when the value may hold an expression. */
  name?: string;
  value?: string;
}

/** Splits `a=1&b={{…}}`; only pairs whose decoded value contains `{{` are decoded and kept aside. */
function splitForm(text: string): FormPart[] {
  if (text === '') return [];
  return text.split('&').map((raw) => {
    if (!raw.includes('%7B') && !raw.includes('%7b') && !raw.includes('{')) return { raw };
    const eq = raw.indexOf('=');
    if (eq === -1) return { raw };
    const value = decodeFormPart(raw.slice(eq + 1));
    return value !== undefined && value.includes(OPEN) ? { raw, name: raw.slice(0, eq), value } : { raw };
  });
}

function joinForm(parts: FormPart[], r: Rendering): string {
  return parts.map((p) => (p.value === undefined ? p.raw : `${p.name}=${encodeFormPart(r.text(p.value))}`)).join('&');
}

/**
 * Finds the expressions of `body`, `headers` and `query`, resolves them with `use`, and puts the
 * values in: the body in place, headers and query returned. A request without expressions is
 * returned unchanged and `use` is not called.
 */
export async function detokenizeParts(
  body: ProxyBody,
  headers: Record<string, string | string[]>,
  query: string,
  use: UseTokens,
): Promise<DetokenizedParts> {
  const scan = new ExpressionScan();
  // The body.
  let json: unknown;
  let form: FormPart[] | undefined;
  let text: string | undefined;
  if (!body.isEmpty) {
    const bytes = body.serialize();
    if (bytes.includes(OPEN) || (body.isForm && (bytes.includes('%7B') || bytes.includes('%7b')))) {
      if (body.isJson) {
        json = body.jsonValue();
        scan.json(json);
      } else if (body.isForm) {
        // Split and joined whole: bytes that are not UTF-8 would come back as U+FFFD (refused).
        form = splitForm(body.formText());
        for (const p of form) if (p.value !== undefined) scan.text(p.value);
      } else if (isUtf8(bytes)) {
        // Any other type is taken as text when it is UTF-8; binary bodies pass as they are.
        text = bytes.toString('utf8');
        scan.text(text);
      }
    }
  }
  // Header values.
  const headerHits: string[] = [];
  for (const [name, value] of Object.entries(headers)) {
    const values = Array.isArray(value) ? value : [value];
    if (!values.some((v) => v.includes(OPEN))) continue;
    headerHits.push(name);
    for (const v of values) scan.text(v);
  }
  // The query.
  const queryParts = splitForm(query);
  for (const p of queryParts) if (p.value !== undefined) scan.text(p.value);

  if (scan.ids.length === 0) return { headers, query, used: 0 };
  const r = await scan.render(await use(scan));

  const outHeaders = { ...headers };
  for (const name of headerHits) {
    const value = headers[name]!;
    const next = Array.isArray(value) ? value.map((v) => r.text(v)) : r.text(value);
    if ((Array.isArray(next) ? next : [next]).some((v) => HEADER_FORBIDDEN.test(v))) {
      throw r.refuse(new ServiceError('validation_failed', {
        detail: `The detokenized value of the header ${name} contains a line break or NUL, which a header cannot carry; nothing was sent`,
      }));
    }
    outHeaders[name] = next;
  }
  if (json !== undefined) body.setJson(r.json(json));
  else if (form) body.replace(joinForm(form, r));
  else if (text !== undefined) body.replace(r.text(text));
  return { headers: outHeaders, query: joinForm(queryParts, r), used: scan.ids.length };
}
