/**
 * The leak guard's scanner: finds card numbers in bytes on their way to a destination. A card
 * number here is a run of 13 to 19 digits (optionally grouped by single spaces, dashes, or `+`,
 * which is how a form-encoded body writes a space) that starts with 2–6 (the ranges of the major
 * card networks) and passes the Luhn check. In a grouped run any consecutive groups may be the
 * card (`qty 2 4242 4242 4242 4242`, two grouped cards one space apart); a contiguous run of more
 * than 19 digits is a longer number, not a card; digits glued to letters still count
 * (`card4242…`). A space written `%20` is not a separator.
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
  /**
   * The groups (contiguous digit segments) of the current run, oldest first: a card may be any
   * consecutive groups of it (`qty 2 4242 4242 4242 4242`, or two grouped cards one space apart).
   * At most MAX_DIGITS groups are kept: no card spans more.
   */
  private groups: string[] = [];
  /** Digits of the current contiguous segment (no separators). */
  private seg = '';
  private segOverflow = false;
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
        this.pendingSeparator = false;
        if (this.seg.length < MAX_DIGITS) this.seg += String.fromCharCode(c);
        else this.segOverflow = true;
      } else if ((c === SPACE || c === DASH || c === PLUS) && this.seg.length > 0 && !this.pendingSeparator) {
        this.endSegment();
        this.pendingSeparator = true;
      } else if (this.seg.length > 0 || this.groups.length > 0) {
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

  /**
   * A segment ended: checks the windows of consecutive groups that end with it, shortest first
   * (the segment alone is a contiguous number). A card found consumes its groups, so no digit is
   * counted twice. A segment over 19 digits is a longer number: no window crosses it.
   */
  private endSegment(): void {
    if (this.segOverflow) {
      this.groups = [];
    } else if (this.seg.length > 0) {
      const groups = this.groups;
      groups.push(this.seg);
      if (groups.length > MAX_DIGITS) groups.shift();
      let digits = '';
      for (let k = groups.length - 1; k >= 0; k--) {
        digits = groups[k]! + digits;
        if (digits.length > MAX_DIGITS) break;
        if (isCardNumber(digits)) {
          this.found++;
          this.groups = [];
          break;
        }
      }
    }
    this.seg = '';
    this.segOverflow = false;
  }

  private endRun(): void {
    this.endSegment();
    this.groups = [];
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
