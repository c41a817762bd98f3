/**
 * The token types: for each, the shape and validation of its `data`, its default container, its
 * default fingerprint expression, what a `mask` reader sees when the token has no mask expression
 * of its own, and its disclosure budget: what of a value may ever reach someone who may not read
 * it (SECURITY.md "Disclosure budget"). Masks render over the budget's view of the data and alias
 * ids keep at most the budget's characters, so no expression shows more. The token API, /tokenize,
 * the proxy's tokenize transform, reactors' tokenize and the docs all read this one table (docs/api.md "Token types" is generated
 * from it and checked by test/vault/token-types.test.ts).
 *
 * Validation messages describe the rule, never the value. Masks keep separators (`-`) where they
 * are and replace digits: an SSN `123-45-6789` reads `XXX-XX-6789`.
 */
import { addFieldError, type FieldErrors } from '../errors.js';
import { luhnValid } from '../luhn.js';
import { maskedCard, validateCard } from './card.js';

/**
 * What of a value may ever be shown to someone who may not read it:
 * - `digits`: at most the first `first` and the last `last` digits of the sensitive number (for a
 *   card, its number; for a bank token, its account number), never anything between;
 * - `all`: the whole value (routing numbers are public);
 * - `creator`: what the token's creator says with its own mask (a `token`: its creator sent the
 *   value, so it may choose).
 */
export type DisclosureBudget =
  | { readonly kind: 'digits'; readonly first: number; readonly last: number }
  | { readonly kind: 'all' }
  | { readonly kind: 'creator' };

export interface TokenTypeSpec {
  readonly name: string;
  readonly budget: DisclosureBudget;
  /** The budget as the docs state it. */
  readonly budgetDoc: string;
  /**
   * The data as the budget lets a non-reader see it: every digit outside the budget replaced by X
   * (separators kept), a card's cvc left out. Mask expressions render over this view.
   */
  view(data: unknown): unknown;
  /** The `data` a definition of this type holds, for the docs. */
  readonly data: string;
  /** When a value is valid, for the docs. */
  readonly validWhen: string;
  readonly container: string;
  /** The fingerprint expression a definition without one gets; null: no fingerprint. */
  readonly fingerprint: string | null;
  /** What the docs say of the fingerprint's input. */
  readonly fingerprintDoc: string;
  /** What a `mask` reader sees without a mask expression, for the docs. */
  readonly maskDoc: string;
  /** Whether a definition may carry its own `mask` expression (a card's mask is the service's). */
  readonly customMask: boolean;
  /** The validated data (a copy where it is an object), or null with the problems recorded under `path`. */
  parse(data: unknown, path: string, errors: FieldErrors): unknown;
  /** What a `mask` reader sees when the token has no mask expression; undefined: no data. */
  mask(data: unknown): unknown;
}

/**
 * Every digit but the first `first` and the last `keep` digits replaced by X; other characters
 * stay where they are.
 */
export function maskDigits(value: string, keep = 4, first = 0): string {
  let total = 0;
  for (let i = 0; i < value.length; i++) if (isDigit(value.charCodeAt(i))) total++;
  let seen = 0;
  let out = '';
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (isDigit(c)) {
      out += seen < first || seen >= total - keep ? value[i] : 'X';
      seen++;
    } else out += value[i];
  }
  return out;
}

const CARD_BUDGET: DisclosureBudget = { kind: 'digits', first: 6, last: 4 };
const LAST4_BUDGET: DisclosureBudget = { kind: 'digits', first: 0, last: 4 };
const CARD_BUDGET_DOC = 'first 6 and last 4 digits';
const LAST4_BUDGET_DOC = 'last 4 digits';

/** A string's budget view: the digits the budget keeps, X for the others. */
function digitsView(budget: DisclosureBudget) {
  return (data: unknown): unknown => {
    if (typeof data !== 'string' || budget.kind !== 'digits') return data;
    return maskDigits(data, budget.last, budget.first);
  };
}

function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

/** The ABA routing number checksum: 3·(d1+d4+d7) + 7·(d2+d5+d8) + (d3+d6+d9) ≡ 0 (mod 10). */
export function abaValid(routing: string): boolean {
  if (!/^\d{9}$/.test(routing)) return false;
  const d = [...routing].map(Number);
  const sum = 3 * (d[0]! + d[3]! + d[6]!) + 7 * (d[1]! + d[4]! + d[7]!) + (d[2]! + d[5]! + d[8]!);
  return sum % 10 === 0;
}

const ROUTING_RULE = '9 digits with a valid ABA checksum';
const ACCOUNT_RULE = '3 to 17 digits';
const ACCOUNT = /^\d{3,17}$/;

const add = addFieldError;

/** A string type: `valid` decides, `rule` is the message (it describes the rule, never the value). */
function stringType(spec: Omit<TokenTypeSpec, 'parse' | 'customMask' | 'view'> & { valid(s: string): boolean; rule: string }): TokenTypeSpec {
  const { valid, rule, ...rest } = spec;
  return {
    ...rest,
    view: digitsView(spec.budget),
    customMask: true,
    parse(data, path, errors) {
      if (typeof data !== 'string') {
        add(errors, path, `must be a string for type ${spec.name}`);
        return null;
      }
      if (!valid(data)) {
        add(errors, path, `must be ${rule}`);
        return null;
      }
      return data;
    },
  };
}

const DIGITS_FINGERPRINT = '{{ data | digits }}';

export const TOKEN_TYPE_SPECS: readonly TokenTypeSpec[] = [
  {
    name: 'token', data: 'any string', validWhen: 'any string', container: '/general/high/', fingerprint: null,
    fingerprintDoc: 'none', maskDoc: 'nothing, or its `mask` expression', customMask: true,
    budget: { kind: 'creator' }, budgetDoc: 'what its creator\'s `mask` expression shows', view: (data) => data,
    parse(data, path, errors) {
      if (typeof data === 'string') return data;
      add(errors, path, 'must be a string for type token');
      return null;
    },
    mask: () => undefined,
  },
  {
    name: 'card', data: '`{number, expiration_month?, expiration_year?, cvc?}`',
    validWhen: 'number: 13–19 digits, Luhn-valid; month 1–12; cvc 3–4 digits', container: '/pci/high/',
    fingerprint: '{{ data.number }}', fingerprintDoc: 'the number', maskDoc: 'the number with all but its last 4 digits as X; month and year', customMask: false,
    budget: CARD_BUDGET, budgetDoc: `the number's ${CARD_BUDGET_DOC}; month and year; never the cvc`,
    view(data) {
      const c = data as { number: string; expiration_month?: number; expiration_year?: number };
      const out: Record<string, unknown> = { number: maskDigits(c.number, 4, 6) };
      if (c.expiration_month !== undefined) out.expiration_month = c.expiration_month;
      if (c.expiration_year !== undefined) out.expiration_year = c.expiration_year;
      return out;
    },
    parse: (data, path, errors) => validateCard(data, path, errors),
    mask: (data) => maskedCard(data as Parameters<typeof maskedCard>[0]),
  },
  stringType({
    name: 'card_number', data: 'a string of 13–19 digits', validWhen: 'Luhn-valid', container: '/pci/high/',
    fingerprint: DIGITS_FINGERPRINT, fingerprintDoc: 'the digits', maskDoc: 'X for all but the last 4 digits, same length',
    budget: CARD_BUDGET, budgetDoc: CARD_BUDGET_DOC,
    valid: (s) => /^\d{13,19}$/.test(s) && luhnValid(s), rule: '13 to 19 digits passing the Luhn check',
    mask: (d) => maskDigits(d as string),
  }),
  {
    name: 'bank', data: '`{routing_number, account_number}`', validWhen: `routing number: ${ROUTING_RULE}; account number: ${ACCOUNT_RULE}`,
    container: '/bank/high/', fingerprint: '{{ data.routing_number }}{{ data.account_number }}', fingerprintDoc: 'routing number + account number',
    maskDoc: 'the routing number as it is; the account number with X for all but its last 4 digits', customMask: true,
    budget: LAST4_BUDGET, budgetDoc: `the routing number; the account number's ${LAST4_BUDGET_DOC}`,
    view(data) {
      const b = data as { routing_number: string; account_number: string };
      return { routing_number: b.routing_number, account_number: maskDigits(b.account_number) };
    },
    parse(data, path, errors) {
      if (typeof data !== 'object' || data === null || Array.isArray(data)) {
        add(errors, path, 'must be an object {routing_number, account_number} for type bank');
        return null;
      }
      const o = data as Record<string, unknown>;
      let ok = true;
      for (const k of Object.keys(o)) {
        if (k !== 'routing_number' && k !== 'account_number') {
          add(errors, `${path}.${k}`, 'unknown field');
          ok = false;
        }
      }
      if (typeof o.routing_number !== 'string' || !abaValid(o.routing_number)) {
        add(errors, `${path}.routing_number`, `must be ${ROUTING_RULE}`);
        ok = false;
      }
      if (typeof o.account_number !== 'string' || !ACCOUNT.test(o.account_number)) {
        add(errors, `${path}.account_number`, `must be ${ACCOUNT_RULE}`);
        ok = false;
      }
      return ok ? { routing_number: o.routing_number, account_number: o.account_number } : null;
    },
    mask(data) {
      const b = data as { routing_number: string; account_number: string };
      return { routing_number: b.routing_number, account_number: maskDigits(b.account_number) };
    },
  },
  stringType({
    name: 'us_bank_routing_number', data: 'a string', validWhen: ROUTING_RULE, container: '/bank/low/',
    fingerprint: DIGITS_FINGERPRINT, fingerprintDoc: 'the digits', maskDoc: 'as it is (routing numbers are public)',
    budget: { kind: 'all' }, budgetDoc: 'all of it (routing numbers are public)',
    valid: abaValid, rule: ROUTING_RULE, mask: (d) => d,
  }),
  stringType({
    name: 'us_bank_account_number', data: 'a string', validWhen: ACCOUNT_RULE, container: '/bank/high/',
    fingerprint: DIGITS_FINGERPRINT, fingerprintDoc: 'the digits', maskDoc: 'X for all but the last 4 digits',
    budget: LAST4_BUDGET, budgetDoc: LAST4_BUDGET_DOC,
    valid: (s) => ACCOUNT.test(s), rule: ACCOUNT_RULE, mask: (d) => maskDigits(d as string),
  }),
  stringType({
    name: 'social_security_number', data: 'a string', validWhen: '`###-##-####` or 9 digits', container: '/pii/high/',
    fingerprint: DIGITS_FINGERPRINT, fingerprintDoc: 'the 9 digits (with or without dashes: the same fingerprint)',
    maskDoc: '`XXX-XX-` and the last 4 (X for all but the last 4 when written without dashes)',
    budget: LAST4_BUDGET, budgetDoc: LAST4_BUDGET_DOC,
    valid: (s) => /^(\d{3}-\d{2}-\d{4}|\d{9})$/.test(s), rule: 'a social security number: ###-##-#### or 9 digits',
    mask: (d) => maskDigits(d as string),
  }),
  stringType({
    name: 'employer_id_number', data: 'a string', validWhen: '`##-#######` or 9 digits', container: '/pii/high/',
    fingerprint: DIGITS_FINGERPRINT, fingerprintDoc: 'the 9 digits', maskDoc: 'X for all but the last 4 digits, separators kept',
    budget: LAST4_BUDGET, budgetDoc: LAST4_BUDGET_DOC,
    valid: (s) => /^(\d{2}-\d{7}|\d{9})$/.test(s), rule: 'an employer identification number: ##-####### or 9 digits',
    mask: (d) => maskDigits(d as string),
  }),
];

const BY_NAME = new Map(TOKEN_TYPE_SPECS.map((s) => [s.name, s]));

export const TOKEN_TYPE_NAMES: readonly string[] = TOKEN_TYPE_SPECS.map((s) => s.name);

/** The type named `name`, or undefined for an unknown one. */
export function tokenType(name: string): TokenTypeSpec | undefined {
  return BY_NAME.get(name);
}

/** The type of a stored token (its type was checked when it was written). */
export function storedType(name: string): TokenTypeSpec {
  return BY_NAME.get(name) ?? TOKEN_TYPE_SPECS[0]!;
}

/** The Markdown table of docs/api.md "Token types" (generated; a test compares it with the file). */
export function tokenTypesTable(): string {
  const cell = (text: string) => text.replace(/\|/g, '\\|');
  const rows = TOKEN_TYPE_SPECS.map((s) => `| \`${s.name}\` | ${cell(s.data)} | ${cell(s.validWhen)} | \`${s.container}\` | ${s.fingerprint === null ? 'none' : `\`${cell(s.fingerprint)}\`: ${cell(s.fingerprintDoc)}`} | ${cell(s.maskDoc)} |`);
  return ['| type | data | valid when | default container | default fingerprint | what a `mask` reader sees |', '|---|---|---|---|---|---|', ...rows].join('\n');
}

/** The Markdown table of SECURITY.md "Disclosure budget" (generated; the same test checks it). */
export function disclosureBudgetTable(): string {
  const rows = TOKEN_TYPE_SPECS.map((s) => `| \`${s.name}\` | ${s.budgetDoc.replace(/\|/g, '\\|')} |`);
  return ['| type | what someone who may not read the value may ever see of it |', '|---|---|', ...rows].join('\n');
}

/** The short table of README.md "Token types" (generated; the same test checks it). */
export function tokenTypesReadmeTable(): string {
  const cell = (text: string) => text.replace(/\|/g, '\\|');
  const rows = TOKEN_TYPE_SPECS.map((s) => `| \`${s.name}\` | ${cell(s.data)} | \`${s.container}\` | ${cell(s.maskDoc)} |`);
  return ['| type | data | default container | what a `mask` reader sees |', '|---|---|---|---|', ...rows].join('\n');
}
