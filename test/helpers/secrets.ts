/**
 * Secrets for tests that scan bytes (store files, Redis values, logs, answers, upstream requests)
 * for a value that must not be there. A scan is only a test if the value cannot turn up by chance:
 * a fixed 4-digit cvc sits inside base64, hex ids, ports and millisecond timestamps every so often
 * (issue 14), and a fixed card number is the same in every test. So:
 *
 * - card numbers are drawn per test: 16 Luhn-valid digits (15 random), about 10^15 values, which no
 *   timestamp, id or ciphertext holds by chance;
 * - a cvc is only ever looked for where it cannot collide: next to its field name (`"cvc":"8306"`,
 *   `cvc=8306`, escaped JSON, …: `cvcPattern`), or as a whole stored value (`isExactly`), never as
 *   bare digits in a larger text;
 * - digit fragments of a card are looked for only as whole runs (`digitRun`), not inside longer ones.
 */
import { randomBytes, randomInt } from 'node:crypto';

/** The Luhn check digit that completes `body`. */
export function luhnCheckDigit(body: string): string {
  let sum = 0;
  // Walking right to left, the check digit will take position 0: the body's last digit is doubled.
  for (let i = body.length - 1, double = true; i >= 0; i--, double = !double) {
    let d = body.charCodeAt(i) - 48;
    if (double) d = d * 2 > 9 ? d * 2 - 9 : d * 2;
    sum += d;
  }
  return String((10 - (sum % 10)) % 10);
}

export function luhnValid(digits: string): boolean {
  return /^[0-9]+$/.test(digits) && luhnCheckDigit(digits.slice(0, -1)) === digits.slice(-1);
}

/**
 * A Luhn-valid card number of `length` digits starting with `prefix` (default a 16-digit Visa-range
 * number), the rest random. Never a repetition of one short pattern (so it cannot be mistaken for
 * `4242…` test data elsewhere in a text).
 */
export function randomCard(prefix = '4', length = 16): string {
  for (;;) {
    let body = prefix;
    while (body.length < length - 1) body += String(randomInt(10));
    const card = body + luhnCheckDigit(body);
    if (!/^(\d{1,4})\1+\d?$/.test(card)) return card;
  }
}

/** A 4-digit cvc, random per call. Only ever scan for it with cvcPattern or isExactly. */
export function randomCvc(): string {
  return String(randomInt(1000, 10_000));
}

/** `card` in groups of four (the last group takes what is left), joined by `sep`. */
export function grouped(card: string, sep = ' '): string {
  return card.match(/.{1,4}/g)!.join(sep);
}

/** A marker no text holds by chance: `label-` and 24 hex digits. */
export function randomMarker(label: string): string {
  return `${label}-${randomBytes(12).toString('hex')}`;
}

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * The cvc next to its field name, in every encoding a leak would use: JSON (`"cvc":"8306"`,
 * `"cvc": 8306`), JSON inside a JSON string (`\"cvc\":\"8306\"`), a form (`cvc=8306`), URL-encoded
 * JSON (`cvc%22%3A%228306`), text (`cvc 8306`). Not `cvc_sealed` or a longer number.
 */
export function cvcPattern(cvc: string): RegExp {
  return new RegExp(`cvc(?:[\\s"'\\\\:=]|%2[027]|%3[AaDd]|%5[Cc])*${escapeRe(cvc)}(?![0-9])`, 'i');
}

/** `digits` as a whole run: not part of a longer number (a timestamp, a port, another id). */
export function digitRun(digits: string): RegExp {
  return new RegExp(`(?<![0-9])${escapeRe(digits)}(?![0-9])`);
}

/**
 * Every form a card number takes once it has left: the plain digits, grouped by space, dash or
 * `+` (a form-encoded space), and its first and last eight digits as whole runs (a fragment).
 */
export function cardPattern(card: string): RegExp {
  const groups = card.match(/.{1,4}/g)!.map(escapeRe);
  return new RegExp(
    [card, groups.join('[ +-]'), `(?<![0-9])${card.slice(0, 8)}(?![0-9])`, `(?<![0-9])${card.slice(-8)}(?![0-9])`, `(?<![0-9])${groups.slice(0, 2).join('[ +-]')}(?![0-9])`].join('|'),
  );
}
