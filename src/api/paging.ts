/**
 * Page sizes shared by every paged route (the token list and search, GET /logs, the management
 * lists; their query schemas check them), and the page-based answer of the management lists.
 */

/** Page sizes of every paged route. */
export const DEFAULT_PAGE_SIZE = 20;
export const MAX_PAGE_SIZE = 100;

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
