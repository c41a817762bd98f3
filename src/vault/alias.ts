/**
 * Alias ids: a token's `id` given as an expression over its data, drawn at random when
 * the token is created, so a legacy system gets a value of the shape it expects.
 *
 * - `{{ data | alias_card }}` (a `card_number`) or `{{ data.number | alias_card }}` (a `card`): a
 *   random number of the card's length keeping its first 6 and last 4 digits, Luhn-valid, never
 *   the card number itself.
 * - `{{ data | alias_preserve_format }}`: every letter or digit replaced by a random one of its
 *   class (digit, lower case, upper case), every other character kept where it is.
 * - `{{ data | alias_preserve_length }}`: random letters and digits of the value's length.
 * - Both take `: <reveal_first>, <reveal_last>`: that many leading and trailing characters kept.
 *
 * An id is visible to every key that may list tokens, so the id expression is parsed strictly:
 * exactly one of these forms, nothing else (no `{{ data }}`, no `slice`), and the characters an
 * alias keeps are bounded: at most the type's disclosure budget (a card's first 6 and last 4, an
 * SSN's last 4; src/vault/token-types.ts), never more than 10, and at least 4 letters or digits
 * drawn.
 *
 * The forms without a window (`alias_card`, `alias_preserve_format`, `alias_preserve_length`) are
 * named options: a caller that may not compute on the value (a public key, a reactor's tokenize
 * of detokenized values) may still ask for them (auth/access.ts templatePolicy).
 */
import { randomInt } from 'node:crypto';
import { luhnValid } from '../luhn.js';
import { tokenType } from './token-types.js';

export type AliasFilter = 'alias_card' | 'alias_preserve_format' | 'alias_preserve_length';

export interface AliasSpec {
  filter: AliasFilter;
  /** What the alias is drawn from: the string data, or a card's number. */
  source: 'data' | 'data.number';
  revealFirst: number;
  revealLast: number;
}

/** The most characters of the value an alias may keep (alias_card's 6 + 4). */
export const MAX_REVEALED = 10;
/** The fewest letters or digits an alias must draw at random. */
export const MIN_DRAWN = 4;

const FORM = /^\{\{\s*(data(?:\.number)?)\s*\|\s*(alias_card|alias_preserve_format|alias_preserve_length)\s*(?::\s*(\d{1,3})\s*,\s*(\d{1,3})\s*)?\}\}$/;

/** Whether `expr` is exactly one of the alias forms without a window: a named option. */
export function isNamedAlias(expr: string): boolean {
  const m = FORM.exec(expr);
  return m !== null && m[3] === undefined;
}

/** Whether an `id` is an expression (and so must be an alias expression). */
export function isIdExpression(id: string): boolean {
  return id.includes('{{') || id.includes('}}');
}

/** The alias an id expression asks for, or a message saying why it is refused (never quoting data). */
export function parseAlias(expr: string, type: string): AliasSpec | string {
  const m = FORM.exec(expr);
  if (!m) {
    return 'an id expression may only be {{ data | alias_card }}, {{ data.number | alias_card }}, {{ data | alias_preserve_format[: first, last] }} or {{ data | alias_preserve_length[: first, last] }}: an id is visible to every key that lists tokens';
  }
  const source = m[1] as AliasSpec['source'];
  const filter = m[2] as AliasFilter;
  if (filter === 'alias_card' && m[3] !== undefined) return 'alias_card takes no arguments (it keeps the first 6 and last 4 digits)';
  if (source === 'data.number' && type !== 'card') return 'data.number is the number of a card: use {{ data | … }} for this type';
  if (source === 'data' && type === 'card') return 'a card alias is drawn from its number: {{ data.number | alias_card }}';
  if (filter === 'alias_card' && type !== 'card' && type !== 'card_number') return 'alias_card is for card and card_number tokens';
  if (type === 'bank') return 'a bank token has no one string to alias';
  const revealFirst = filter === 'alias_card' ? 6 : Number(m[3] ?? 0);
  const revealLast = filter === 'alias_card' ? 4 : Number(m[4] ?? 0);
  if (revealFirst + revealLast > MAX_REVEALED) return `an alias may keep at most ${MAX_REVEALED} characters of the value`;
  const budget = tokenType(type)?.budget;
  if (budget?.kind === 'digits' && (revealFirst > budget.first || revealLast > budget.last)) {
    return budget.first === 0
      ? `an alias of a ${type} may keep at most its last ${budget.last} characters (its disclosure budget)`
      : `an alias of a ${type} may keep at most its first ${budget.first} and last ${budget.last} characters (its disclosure budget)`;
  }
  return { filter, source, revealFirst, revealLast };
}

const ID_CHAR = /^[A-Za-z0-9._~:@+=-]$/;
const DIGITS = '0123456789';
const LOWER = 'abcdefghijklmnopqrstuvwxyz';
const UPPER = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
const ALNUM = DIGITS + LOWER + UPPER;

function classOf(c: string): string | null {
  if (c >= '0' && c <= '9') return DIGITS;
  if (c >= 'a' && c <= 'z') return LOWER;
  if (c >= 'A' && c <= 'Z') return UPPER;
  return null;
}

/**
 * Whether `value` can have this alias: a message when not (never quoting the value). The alias
 * must be a valid id (3-400 characters of letters, digits and . _ ~ : @ + = -) and draw at least
 * MIN_DRAWN letters or digits at random.
 */
export function checkAliasable(spec: AliasSpec, value: string): string | null {
  if (spec.filter === 'alias_card') {
    if (!/^\d{13,19}$/.test(value)) return 'alias_card needs a card number of 13 to 19 digits';
    return null;
  }
  if (value.length < 3 || value.length > 400) return 'an alias has the value\'s length, and an id has 3 to 400 characters';
  const kept = spec.revealFirst + spec.revealLast;
  let drawn = 0;
  for (let i = spec.revealFirst; i < value.length - spec.revealLast; i++) {
    const c = value[i]!;
    if (spec.filter === 'alias_preserve_length' || classOf(c) !== null) drawn++;
    else if (!ID_CHAR.test(c)) return 'the value holds characters an id may not (ids are letters, digits and . _ ~ : @ + = -), so alias_preserve_format cannot keep them';
  }
  if (kept >= value.length || drawn < MIN_DRAWN) return `the alias would draw fewer than ${MIN_DRAWN} letters or digits: reveal fewer characters`;
  for (const c of value.slice(0, spec.revealFirst) + value.slice(value.length - spec.revealLast)) {
    if (!ID_CHAR.test(c)) return 'the revealed characters include some an id may not hold';
  }
  return null;
}

function pick(chars: string): string {
  return chars[randomInt(chars.length)]!;
}

/** A random Luhn-valid number of the card's length with its first 6 and last 4 digits, never the card. */
function aliasCard(card: string): string {
  const n = card.length;
  for (;;) {
    const middle = Array.from({ length: n - 10 }, () => pick(DIGITS));
    // Solve one middle digit so that the whole number passes Luhn (the last digit is kept, so
    // the usual check digit cannot be chosen): each digit position maps 0-9 onto 0-9.
    const fix = randomInt(middle.length);
    for (let d = 0; d <= 9; d++) {
      middle[fix] = String(d);
      const candidate = card.slice(0, 6) + middle.join('') + card.slice(n - 4);
      if (luhnValid(candidate)) {
        if (candidate !== card) return candidate;
        break;
      }
    }
  }
}

/** Draws one alias of `value` (checkAliasable passed). */
export function drawAlias(spec: AliasSpec, value: string): string {
  if (spec.filter === 'alias_card') return aliasCard(value);
  for (;;) {
    let out = value.slice(0, spec.revealFirst);
    for (let i = spec.revealFirst; i < value.length - spec.revealLast; i++) {
      const c = value[i]!;
      if (spec.filter === 'alias_preserve_length') out += pick(ALNUM);
      else out += classOf(c) === null ? c : pick(classOf(c)!);
    }
    out += value.slice(value.length - spec.revealLast);
    if (out !== value) return out;
  }
}
