/**
 * What every paged route shares (the token list and search, GET /logs, the management lists): the
 * page sizes, the query parameters `size` and `start` with their one 400, and the page-based
 * answer of the management lists.
 */
import { z } from 'zod';
import { ServiceError } from '../errors.js';

/** Page sizes of every paged route. */
export const DEFAULT_PAGE_SIZE = 20;
export const MAX_PAGE_SIZE = 100;

/** A query parameter's first value (URLSearchParams.get), or the last (a repeated filter: the last wins). */
export const first = <T>(v: T | T[]): T => (Array.isArray(v) ? v[0]! : v);
export const last = <T>(v: T | T[]): T => (Array.isArray(v) ? v[v.length - 1]! : v);
/** A blank parameter (`?size=`) is an absent one: its default applies. */
export const blank = (v: unknown) => (v === '' || v === null ? undefined : v);
/** The first value of a parameter, absent when blank. */
export const firstValue = (v: unknown) => blank(first(v));
/**
 * A whole-number parameter as written in decimal digits: `"20"` is 20, while `"0x10"`, `"1e2"`,
 * `" 2"` and `"2.0"` stay strings and fail the number check (z.coerce would take them as 16, 100, 2).
 */
export const decimal = (v: unknown) => (typeof v === 'string' && /^[0-9]{1,15}$/.test(v) ? Number(v) : v);
/** The first value of a whole-number parameter, absent when blank. */
export const firstDecimal = (v: unknown) => decimal(firstValue(v));

/** `size`: 1 to MAX_PAGE_SIZE, DEFAULT_PAGE_SIZE when absent. */
export const pageSizeParam = (pick: (v: unknown) => unknown = first) =>
  z.preprocess((v) => decimal(blank(pick(v))), z.number().int().min(1).max(MAX_PAGE_SIZE).default(DEFAULT_PAGE_SIZE))
    .describe(`Page size, 1 to ${MAX_PAGE_SIZE} (default ${DEFAULT_PAGE_SIZE})`);

/** `start`: the opaque cursor of the previous page's `pagination.next`; null for the first page. */
export const cursorParam = (pick: (v: unknown) => unknown = first) =>
  z.preprocess((v) => blank(pick(v)), z.string().nullable().default(null)).describe('The pagination.next of the previous page');

/** The one answer to a bad `size`, on every paged route. */
export function sizeInvalid(): ServiceError {
  return new ServiceError('validation_failed', { detail: `size must be an integer from 1 to ${MAX_PAGE_SIZE}`, errors: { size: [`must be 1 to ${MAX_PAGE_SIZE}`] } });
}

/**
 * The page-based lists of the management routes, as the original service's clients
 * iterate them: `page` (1-based) and `size`, answered with the totals. A page past the last is
 * empty with the same totals: the clients' iterators stop at the first empty page.
 */
export interface PageNumbers {
  total_items: number;
  page_number: number;
  page_size: number;
  total_pages: number;
}

export function pageOf<T>(items: readonly T[], page: number, size: number): { pagination: PageNumbers; data: T[] } {
  const from = (page - 1) * size;
  return {
    pagination: { total_items: items.length, page_number: page, page_size: size, total_pages: Math.ceil(items.length / size) },
    data: items.slice(from, from + size),
  };
}
