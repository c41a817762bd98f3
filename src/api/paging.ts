/**
 * Page parameters of the routes that still check their query by hand (GET /logs): the same
 * answers as the token list's schema gives (src/api/tokens.ts, with the same sizes), `size` 1 to
 * 100 and an opaque `start` cursor.
 */
import { ServiceError } from '../errors.js';

/** Page sizes of every paged route (the token list and search, GET /logs). */
export const DEFAULT_PAGE_SIZE = 20;
export const MAX_PAGE_SIZE = 100;

export function pageSize(raw: unknown): number {
  if (raw === undefined || raw === null || raw === '') return DEFAULT_PAGE_SIZE;
  const n = typeof raw === 'number' ? raw : Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > MAX_PAGE_SIZE) {
    throw new ServiceError('validation_failed', { detail: `size must be an integer from 1 to ${MAX_PAGE_SIZE}`, errors: { size: [`must be 1 to ${MAX_PAGE_SIZE}`] } });
  }
  return n;
}

export function cursor(raw: unknown): string | null {
  if (raw === undefined || raw === null || raw === '') return null;
  if (typeof raw !== 'string') throw new ServiceError('invalid_cursor');
  return raw;
}

/**
 * The page-based lists of the management routes (issue 28), as the original service's clients
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
