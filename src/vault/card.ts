/**
 * Card data validation (docs/api.md "Token definitions"): number of 13–19 digits passing Luhn; expiration_month an
 * integer 1–12; expiration_year a four-digit integer; cvc a string of 3–4 digits. An expired
 * card is still accepted. Messages never quote the value.
 */
import { addFieldError, type FieldErrors } from '../errors.js';
import { luhnValid } from '../luhn.js';

export interface CardData {
  number: string;
  expiration_month?: number;
  expiration_year?: number;
  cvc?: string;
}

const CARD_FIELDS = new Set(['number', 'expiration_month', 'expiration_year', 'cvc']);

const add = addFieldError;

/** Validates card `data` at `path` (e.g. "primary_card.data"); returns the card or records errors. */
export function validateCard(data: unknown, path: string, errors: FieldErrors): CardData | null {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    add(errors, path, 'card data must be an object with number, expiration_month, expiration_year and cvc');
    return null;
  }
  const d = data as Record<string, unknown>;
  const before = Object.keys(errors).length;
  for (const k of Object.keys(d)) {
    if (!CARD_FIELDS.has(k)) add(errors, `${path}.${k}`, 'unknown card field');
  }
  const number = d.number;
  if (typeof number !== 'string' || !/^[0-9]+$/.test(number)) {
    add(errors, `${path}.number`, 'card number must be a string of digits');
  } else if (number.length < 13 || number.length > 19) {
    add(errors, `${path}.number`, 'card number must have 13 to 19 digits');
  } else if (!luhnValid(number)) {
    add(errors, `${path}.number`, 'card number fails the Luhn check');
  }
  const month = d.expiration_month;
  if (month !== undefined && (typeof month !== 'number' || !Number.isInteger(month) || month < 1 || month > 12)) {
    add(errors, `${path}.expiration_month`, 'expiration_month must be an integer from 1 to 12');
  }
  const year = d.expiration_year;
  if (year !== undefined && (typeof year !== 'number' || !Number.isInteger(year) || year < 1000 || year > 9999)) {
    add(errors, `${path}.expiration_year`, 'expiration_year must be a four-digit integer');
  }
  if ((month === undefined) !== (year === undefined)) {
    add(errors, `${path}.${month === undefined ? 'expiration_month' : 'expiration_year'}`, 'expiration_month and expiration_year go together');
  }
  const cvc = d.cvc;
  if (cvc !== undefined && (typeof cvc !== 'string' || !/^[0-9]{3,4}$/.test(cvc))) {
    add(errors, `${path}.cvc`, 'cvc must be a string of 3 or 4 digits');
  }
  if (Object.keys(errors).length !== before) return null;
  const card: CardData = { number: number as string };
  if (month !== undefined) card.expiration_month = month as number;
  if (year !== undefined) card.expiration_year = year as number;
  if (cvc !== undefined) card.cvc = cvc as string;
  return card;
}

/** Spec: all but the last four digits replaced by X, length unchanged. */
export function maskCardNumber(number: string): string {
  return 'X'.repeat(Math.max(0, number.length - 4)) + number.slice(-4);
}

/** The masked card fields (spec: `mask` / `data` of a card record). The cvc never appears. */
export function maskedCard(card: CardData): Record<string, unknown> {
  const out: Record<string, unknown> = { number: maskCardNumber(card.number) };
  if (card.expiration_month !== undefined) out.expiration_month = card.expiration_month;
  if (card.expiration_year !== undefined) out.expiration_year = card.expiration_year;
  return out;
}

/** The revealed card fields: everything but the cvc (never returned). */
export function revealedCard(card: CardData): Record<string, unknown> {
  const { cvc: _cvc, ...rest } = card;
  return rest;
}
