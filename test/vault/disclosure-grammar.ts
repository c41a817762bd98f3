/**
 * The generators of the disclosure property (disclosure-suite.ts): pairs of values that agree on
 * their type's disclosure budget, and token definitions whose expressions are drawn from the
 * template grammar, some of them chosen with knowledge of the first value (as an attacker who
 * guesses would choose them).
 *
 * Budgets (src/vault/token-types.ts): card and card_number show at most their first 6 and last 4
 * digits; an SSN its last 4. A pair shares exactly that and the length (cards: also the expiry
 * shown by the card's own mask), and differs in every other digit, so whatever an answer holds of
 * the rest differs between the two answers.
 */
import fc from 'fast-check';
import { luhnValid } from '../helpers/secrets.js';

export type Kind = 'card' | 'card_number' | 'social_security_number';
export const KINDS: readonly Kind[] = ['card', 'card_number', 'social_security_number'];

export interface CardValue {
  number: string;
  expiration_month: number;
  expiration_year: number;
  cvc: string;
}
export type Value = string | CardValue;

export interface Pair {
  kind: Kind;
  a: Value;
  b: Value;
}

const digitsArb = (n: number) => fc.array(fc.integer({ min: 0, max: 9 }), { minLength: n, maxLength: n });

/** The vault refuses a number that repeats one short group (test data); such a pair is redrawn. */
const repeated = (n: string) => /^(\d{1,4})\1+\d?$/.test(n);

/**
 * Two Luhn-valid numbers of `length` digits, the same first 6 and last 4, differing in every
 * middle digit: the first middle digit of A and one middle digit of B are solved for Luhn.
 */
export function cardNumbers(length: number, head: number[], tail: number[], middle: number[], shift: number[]): [string, string] | null {
  const n = length;
  const a = [...head, ...middle, ...tail];
  // Luhn maps each position's digit one-to-one, so exactly one digit fits a chosen position.
  const solve = (digits: number[], p: number): number => {
    for (let d = 0; d <= 9; d++) {
      digits[p] = d;
      if (luhnValid(digits.join(''))) return d;
    }
    throw new Error('unreachable: one digit always completes the Luhn sum');
  };
  solve(a, 6);
  const b = a.map((d, i) => (i >= 6 && i < n - 4 ? (d + 1 + (shift[i - 6]! % 9)) % 10 : d));
  for (let p = 6; p < n - 4; p++) {
    const trial = [...b];
    const d = solve(trial, p);
    if (d !== a[p]) {
      const [sa, sb] = [a.join(''), trial.join('')];
      return repeated(sa) || repeated(sb) ? null : [sa, sb];
    }
  }
  return null;
}

const cardNumberPair: fc.Arbitrary<[string, string]> = fc
  .integer({ min: 13, max: 19 })
  .chain((n) => fc.tuple(fc.constant(n), fc.tuple(fc.integer({ min: 3, max: 6 }), digitsArb(5)), digitsArb(4), digitsArb(n - 10), digitsArb(n - 10)))
  .map(([n, [first, head], tail, middle, shift]) => cardNumbers(n, [first, ...head], tail, middle, shift))
  .filter((x): x is [string, string] => x !== null);

const cvcArb = fc.integer({ min: 100, max: 999 }).map(String);

/** Two SSNs with the same last 4 and format, differing in each of the first 5 digits. */
const ssnPair: fc.Arbitrary<[string, string]> = fc
  .tuple(digitsArb(5), digitsArb(5), digitsArb(4), fc.boolean())
  .map(([head, shift, tail, dashed]) => {
    const other = head.map((d, i) => (d + 1 + (shift[i]! % 9)) % 10);
    const fmt = (h: number[]) => {
      const s = [...h, ...tail].join('');
      return dashed ? `${s.slice(0, 3)}-${s.slice(3, 5)}-${s.slice(5)}` : s;
    };
    return [fmt(head), fmt(other)];
  });

/** Pairs of each kind (cards keep their expiry, shown by the card's own mask; cvcs differ). */
export const PAIRS: Record<Kind, fc.Arbitrary<Pair>> = {
  card: fc.tuple(cardNumberPair, cvcArb, cvcArb, fc.integer({ min: 1, max: 12 }), fc.integer({ min: 2030, max: 2039 })).map(([[a, b], ca, cb, m, y]) => ({
    kind: 'card' as const,
    a: { number: a, expiration_month: m, expiration_year: y, cvc: ca },
    b: { number: b, expiration_month: m, expiration_year: y, cvc: cb },
  })),
  card_number: cardNumberPair.map(([a, b]) => ({ kind: 'card_number' as const, a, b })),
  social_security_number: ssnPair.map(([a, b]) => ({ kind: 'social_security_number' as const, a, b })),
};
export const pairArb: fc.Arbitrary<Pair> = fc.oneof(PAIRS.card, PAIRS.card_number, PAIRS.social_security_number);

/** The string a card's number (or a string value) is: what budgets and aliases are about. */
export function mainString(v: Value): string {
  return typeof v === 'string' ? v : v.number;
}

/**
 * The texts no observer's answer may hold of a value, once alias-drawn characters are masked:
 * the whole value (digits alone, and as written), and for a card, its number less its last 3
 * digits and less its first 3 (each holds the whole middle and more than the budget, and is too
 * long to occur by chance).
 */
export function overBudget(v: Value): string[] {
  const s = mainString(v);
  const digits = s.replace(/\D/g, '');
  const out = new Set([s, digits]);
  if (typeof v !== 'string' || s.length >= 13) {
    out.add(digits.slice(0, -3));
    out.add(digits.slice(3));
  }
  return [...out];
}

// ---------------------------------------------------------------------------------------------
// Expressions

const ALIAS_FORM = /^\{\{\s*(data(?:\.number)?)\s*\|\s*(alias_card|alias_preserve_format|alias_preserve_length)\s*(?::\s*(\d{1,3})\s*,\s*(\d{1,3})\s*)?\}\}$/;

/** How an alias id keeps characters: `first`/`last` kept, the rest drawn (format: letters and digits only). */
export interface AliasShape {
  first: number;
  last: number;
  format: boolean;
}

/** The shape of an alias id expression as the vault documents it, or null for anything else. */
export function aliasShape(expr: string): AliasShape | null {
  const m = ALIAS_FORM.exec(expr);
  if (!m) return null;
  if (m[2] === 'alias_card') return { first: 6, last: 4, format: false };
  return { first: Number(m[3] ?? 0), last: Number(m[4] ?? 0), format: m[2] === 'alias_preserve_format' };
}

/** An alias id with the characters the vault drew replaced by `*` (what may differ by chance). */
export function maskDrawn(id: string, shape: AliasShape): string {
  let out = '';
  for (let i = 0; i < id.length; i++) {
    const c = id[i]!;
    const drawn = i >= shape.first && i < id.length - shape.last && (!shape.format || /[A-Za-z0-9]/.test(c));
    out += drawn ? '*' : c;
  }
  return out;
}

const quoted = (s: string) => `'${s}'`;
const shortText = fc.constantFrom('', 'x', '4', '0', '-', 'X', 'ab', '\\n', ' ');
const digitChar = fc.constantFrom(...'0123456789');
const pattern = fc.oneof(digitChar, fc.constantFrom('X', '-', 'a'));

/** One filter of the grammar with its arguments (numbers and strings). */
export const filterArb: fc.Arbitrary<string> = fc.oneof(
  fc.tuple(fc.integer({ min: -20, max: 20 }), fc.integer({ min: 0, max: 20 })).map(([a, b]) => `slice: ${a}, ${b}`),
  fc.integer({ min: -20, max: 20 }).map((a) => `slice: ${a}`),
  fc.tuple(pattern, shortText).map(([p, s]) => `replace: ${quoted(p)}, ${quoted(s)}`),
  pattern.map((p) => `remove: ${quoted(p)}`),
  shortText.map((s) => `append: ${quoted(s)}`),
  shortText.map((s) => `prepend: ${quoted(s)}`),
  fc.constantFrom('upcase', 'downcase', 'size', 'last4', 'digits', 'json', 'json: 2'),
  fc.integer({ min: 0, max: 20 }).map((n) => `truncate: ${n}`),
  fc.tuple(fc.integer({ min: 0, max: 20 }), fc.constantFrom('', ", 'X'", ", '*'")).map(([n, c]) => `reveal_last: ${n}${c}`),
  fc.integer({ min: 0, max: 20 }).map((n) => `reveal_first: ${n}`),
);

/** What an expression reads: the value (a card's number), another part of a card, or the whole. */
export type Select = 'main' | 'whole' | 'cvc';

/**
 * An expression recipe, turned into text once the value A is known:
 * - chain: a selection and random filters;
 * - probe: a guess of A's k-th character whose right answer changes the outcome: `blowup` makes
 *   the render exceed its output bound (an error only when right), `count` counts the guessed
 *   character (a size that differs with the value);
 * - alias: an alias filter with or without a window (and sometimes over the wrong selection).
 */
export type Recipe =
  | { form: 'chain'; select: Select; filters: string[] }
  | { form: 'probe'; select: Select; probe: 'blowup' | 'count'; k: number }
  | { form: 'alias'; select: Select; filter: 'alias_card' | 'alias_preserve_format' | 'alias_preserve_length'; window: [number, number] | null };

const selectArb: fc.Arbitrary<Select> = fc.oneof({ weight: 6, arbitrary: fc.constant('main' as const) }, { weight: 1, arbitrary: fc.constantFrom('whole' as const, 'cvc' as const) });
const windowPart = fc.oneof(fc.constantFrom(0, 1, 4, 6, 7, 10), fc.integer({ min: 0, max: 12 }));

export const chainArb: fc.Arbitrary<Recipe> = fc.record({ form: fc.constant('chain' as const), select: selectArb, filters: fc.array(filterArb, { maxLength: 4 }) });
export const probeArb: fc.Arbitrary<Recipe> = fc.record({
  form: fc.constant('probe' as const), select: fc.constant('main' as const), probe: fc.constantFrom('blowup' as const, 'count' as const), k: fc.integer({ min: 0, max: 18 }),
});
export const aliasArb: fc.Arbitrary<Recipe> = fc.record({
  form: fc.constant('alias' as const),
  select: fc.oneof({ weight: 9, arbitrary: fc.constant('main' as const) }, { weight: 1, arbitrary: fc.constant('whole' as const) }),
  filter: fc.constantFrom('alias_card' as const, 'alias_preserve_format' as const, 'alias_preserve_length' as const),
  window: fc.option(fc.tuple(windowPart, windowPart), { freq: 2 }) as fc.Arbitrary<[number, number] | null>,
});
export const recipeArb: fc.Arbitrary<Recipe> = fc.oneof({ weight: 3, arbitrary: chainArb }, { weight: 2, arbitrary: probeArb }, { weight: 1, arbitrary: aliasArb });

/** The selection's text in an expression for a value of `kind`. */
function selection(kind: Kind, select: Select): string {
  if (kind !== 'card') return 'data';
  return select === 'main' ? 'data.number' : select === 'cvc' ? 'data.cvc' : 'data';
}

/** The string of A a probe guesses at. */
function probed(a: Value, select: Select): string {
  if (typeof a === 'string') return a;
  return select === 'cvc' ? a.cvc : a.number;
}

/** A recipe as expression text, for values of `kind`, guessing at A. */
export function expression(r: Recipe, kind: Kind, a: Value): string {
  const sel = selection(kind, r.select);
  if (r.form === 'chain') return `{{ ${[sel, ...r.filters].join(' | ')} }}`;
  if (r.form === 'alias') {
    const src = r.select === 'main' ? (kind === 'card' ? 'data.number' : 'data') : kind === 'card' ? 'data' : 'data.number';
    return `{{ ${src} | ${r.filter}${r.window ? `: ${r.window[0]}, ${r.window[1]}` : ''} }}`;
  }
  const target = probed(a, r.select);
  const k = r.k % target.length;
  const guess = target[k]!;
  if (r.probe === 'count') return `{{ ${sel} | remove: '${guess}' | size }}`;
  return `{{ ${sel} | slice: ${k}, 1 | replace: '${guess}', '${'x'.repeat(250)}' | replace: 'x', '${'y'.repeat(250)}' }}`;
}

// ---------------------------------------------------------------------------------------------
// Definitions

/** Where expressions go in a definition; absent fields are left out. */
export interface DefRecipe {
  id: { plain: true } | Recipe | null;
  fingerprint: Recipe | 'default' | null;
  mask: Recipe | null;
  search: Recipe[];
  dedupe: boolean | null;
  /** POST /tokenize: the definition as the body, or under a member. */
  nested: boolean;
}

export const defRecipeArb: fc.Arbitrary<DefRecipe> = fc.record({
  id: fc.oneof(
    { weight: 2, arbitrary: fc.constant(null) },
    { weight: 1, arbitrary: fc.constant({ plain: true as const }) },
    { weight: 4, arbitrary: aliasArb },
    { weight: 1, arbitrary: recipeArb },
  ),
  fingerprint: fc.oneof({ weight: 2, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.constant('default' as const) }, { weight: 2, arbitrary: recipeArb }),
  mask: fc.oneof({ weight: 2, arbitrary: fc.constant(null) }, { weight: 3, arbitrary: recipeArb }),
  search: fc.array(recipeArb, { maxLength: 2 }),
  dedupe: fc.option(fc.boolean(), { freq: 2 }),
  nested: fc.boolean(),
});

const DEFAULT_FINGERPRINT: Record<Kind, string> = { card: '{{ data.number }}', card_number: '{{ data | digits }}', social_security_number: '{{ data | digits }}' };

/** How an answer's id is made comparable: an alias shape, a plain id the test chose, or nothing known. */
export type IdKind = { alias: AliasShape } | { plain: string } | null;

/**
 * A definition of `kind` holding `data` (a value, or the expression that names one), its
 * expressions as the recipe says (guessing at A). `plainId`: the id a plain-id recipe gets
 * (unique per request). `escape`: expressions start with `\{{` (sent through a detokenizer).
 */
export function definition(r: DefRecipe, kind: Kind, data: unknown, a: Value, plainId: string, escape = false): { def: Record<string, unknown>; id: IdKind } {
  const e = (text: string) => (escape ? text.replace(/\{\{/g, '\\{{') : text);
  const def: Record<string, unknown> = { type: kind, data };
  let id: IdKind = null;
  if (r.id !== null) {
    if ('plain' in r.id) {
      def.id = plainId;
      id = { plain: plainId };
    } else {
      const text = expression(r.id, kind, a);
      def.id = e(text);
      const shape = aliasShape(text);
      if (shape) id = { alias: shape };
    }
  }
  if (r.fingerprint !== null) def.fingerprint_expression = e(r.fingerprint === 'default' ? DEFAULT_FINGERPRINT[kind] : expression(r.fingerprint, kind, a));
  if (r.mask !== null) def.mask = e(expression(r.mask, kind, a));
  if (r.search.length > 0) def.search_indexes = r.search.map((x) => e(expression(x, kind, a)));
  if (r.dedupe !== null) def.deduplicate_token = r.dedupe;
  return { def, id };
}

/** A readable one-line account of a definition for a failure message (the expressions only). */
export function describe(def: Record<string, unknown>): string {
  const { data: _data, ...rest } = def;
  return short(JSON.stringify(rest));
}

/** A text with runs of one character over 8 long written `c×n` (a probe's 250 x's). */
export function short(text: string): string {
  return text.replace(/(.)\1{8,}/g, (run, c: string) => `${c}×${run.length}`);
}

