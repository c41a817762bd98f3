/**
 * The leak guard's scanner: finds card numbers in bytes on their way to a destination. A card
 * number here is a run of 13 to 19 digits (optionally grouped by single spaces, dashes, or `+`,
 * which is how a form-encoded body writes a space) that starts with 2–6 (the ranges of the major
 * card networks) and passes the Luhn check. Runs longer than 19 digits are not cards; digits
 * glued to letters still count (`card4242…`). A space written `%20` is not a separator.
 *
 * Streaming: `push` takes chunks as they pass and keeps the state of a run that straddles two
 * chunks, so a pass-through body is scanned without being buffered. Nothing about a finding but
 * its count leaves this module: never the digits.
 */
import { luhnValid } from '../vault/card.js';

const ZERO = 0x30;
const NINE = 0x39;
const SPACE = 0x20;
const DASH = 0x2d;
/** A space in application/x-www-form-urlencoded. */
const PLUS = 0x2b;
const MAX_DIGITS = 19;
const MIN_DIGITS = 13;

export class CardScanner {
  /** Digits of the current run, separators removed (a run may be grouped: `4242 4242 …`). */
  private run = '';
  private runOverflow = false;
  private runGrouped = false;
  /** Digits of the current contiguous segment (no separators). */
  private seg = '';
  private segOverflow = false;
  /** A segment of this run was already a card: the run is not counted again. */
  private hitInRun = false;
  /** The previous byte was a separator right after a digit. */
  private pendingSeparator = false;
  private found = 0;

  /** Card numbers found so far. */
  get findings(): number {
    return this.found;
  }

  push(chunk: Uint8Array): void {
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i]!;
      if (c >= ZERO && c <= NINE) {
        if (this.pendingSeparator) this.runGrouped = true;
        this.pendingSeparator = false;
        const d = String.fromCharCode(c);
        if (this.run.length < MAX_DIGITS) this.run += d;
        else this.runOverflow = true;
        if (this.seg.length < MAX_DIGITS) this.seg += d;
        else this.segOverflow = true;
      } else if ((c === SPACE || c === DASH || c === PLUS) && this.seg.length > 0 && !this.pendingSeparator) {
        this.endSegment();
        this.pendingSeparator = true;
      } else if (this.run.length > 0 || this.seg.length > 0) {
        this.endRun();
      } else {
        this.pendingSeparator = false;
      }
    }
  }

  /** Call at the end of the body: a run that ends the body is checked too. */
  end(): number {
    this.endRun();
    return this.found;
  }

  private endSegment(): void {
    if (!this.segOverflow && isCardNumber(this.seg)) {
      this.found++;
      this.hitInRun = true;
    }
    this.seg = '';
    this.segOverflow = false;
  }

  private endRun(): void {
    this.endSegment();
    if (this.runGrouped && !this.hitInRun && !this.runOverflow && isCardNumber(this.run)) this.found++;
    this.run = '';
    this.runOverflow = false;
    this.runGrouped = false;
    this.hitInRun = false;
    this.pendingSeparator = false;
  }
}

function isCardNumber(digits: string): boolean {
  if (digits.length < MIN_DIGITS || digits.length > MAX_DIGITS) return false;
  const first = digits.charCodeAt(0);
  return first >= 0x32 && first <= 0x36 && luhnValid(digits);
}

/** Card numbers in a whole body. */
export function countCardNumbers(body: Uint8Array): number {
  const s = new CardScanner();
  s.push(body);
  return s.end();
}
