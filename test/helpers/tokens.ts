/** Counting a tenant's tokens through the API, page by page (the calling key must see every container). */
import { KEYS, type TestService } from './service.js';

export async function tokenCount(s: Pick<TestService, 'call'>, key: string = KEYS.private): Promise<number> {
  let n = 0;
  let start: string | null = null;
  do {
    const r = await s.call('GET', `/tokens?size=100${start ? `&start=${encodeURIComponent(start)}` : ''}`, { key });
    if (r.status !== 200) throw new Error(`list failed ${r.status}`);
    n += r.body.data.length;
    start = r.body.pagination.next;
  } while (start);
  return n;
}
