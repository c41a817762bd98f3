/**
 * Pairs of values that agree on exactly what their type's disclosure budget shows (a card: first
 * 6 and last 4 digits; an SSN: last 4) and differ everywhere else, and the check that a text
 * holds no more of a value than that budget.
 */
import { randomInt } from 'node:crypto';
import { luhnValid, randomCard } from '../helpers/secrets.js';

function otherDigit(d: string): string {
  return String((Number(d) + 1 + randomInt(9)) % 10);
}

/** Two 16-digit Visa-range cards: the same first 6 and last 4, every digit between different. */
export function twinCards(): [string, string] {
  for (;;) {
    const a = randomCard('4', 16);
    let b = a.slice(0, 6);
    for (let i = 6; i < 11; i++) b += otherDigit(a[i]!);
    // The 12th digit makes b Luhn-valid; it must differ from a's too.
    for (let d = 0; d < 10; d++) {
      const c = `${b}${d}${a.slice(12)}`;
      if (luhnValid(c) && String(d) !== a[11]) return [a, c];
    }
  }
}

/** Two SSNs `###-##-####`: the same last 4, each of the first 5 digits different. */
export function twinSsns(): [string, string] {
  const last = String(randomInt(10_000)).padStart(4, '0');
  const head = Array.from({ length: 5 }, () => String(randomInt(10)));
  const other = head.map(otherDigit);
  const fmt = (h: string[]) => `${h.slice(0, 3).join('')}-${h.slice(3).join('')}-${last}`;
  return [fmt(head), fmt(other)];
}

/** A 3-digit cvc per card of a pair, different in every digit. */
export function twinCvcs(): [string, string] {
  const a = Array.from({ length: 3 }, () => String(randomInt(10)));
  return [a.join(''), a.map(otherDigit).join('')];
}

/**
 * The windows of a card number that hold a digit beyond its budget: every 7-digit run does
 * (6 + 4 visible of 16 leaves no 7 visible in a row), so none may appear in what the page sees.
 */
export function cardLeakWindows(card: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + 7 <= card.length; i++) out.push(card.slice(i, i + 7));
  return out;
}

/** The 5-digit runs of an SSN's digits (each holds one of its first 5), written with or without dashes. */
export function ssnLeakWindows(ssn: string): string[] {
  const digits = ssn.replace(/-/g, '');
  const out: string[] = [];
  for (let i = 0; i + 5 <= digits.length; i++) out.push(digits.slice(i, i + 5));
  // With its dashes: any 5 characters that hold one of the first five digits.
  for (let i = 0; i < 6; i++) out.push(ssn.slice(i, i + 5));
  return out;
}
