/**
 * Regression tests for the search and paging findings of issue 31 (1, 10 and 11), over real
 * HTTP, on the embedded store and on Redis. Each failed on the code before the fix:
 *   1. a key with token:search on /pci/ under a redact rule (it may list, not read) and
 *      token:create where it reads, created its guess there, took the fingerprint from the
 *      answer and found the /pci/high/ token holding that number with `?fingerprint=` or
 *      `fingerprint:` in a search;
 *  10. the `next` cursor was base64 of a sequence shared by all tenants (`s198` → `s206` after
 *      another tenant created 7 tokens), and a forged or another tenant's cursor was accepted;
 *  11. a custom id holding a card number was accepted (201), stored in clear and audited.
 */
import t from 'tap';
import { baseConfig, KEYS, startTestService, type TestService } from '../helpers/service.js';
import { storeKinds } from './access-stores.js';

const VISA = '4242424242424242';
const MC = '5555555555554444';

/** Searches /pci/ without reading it; creates, reads and searches /general/. */
const LISTER = {
  key: 'test_pci_lister_key_000000000000000',
  rules: [
    { priority: 1, container: '/pci/', transform: 'redact', permissions: ['token:search'] },
    { priority: 2, container: '/general/', transform: 'reveal', permissions: ['token:create', 'token:read', 'token:search'] },
  ],
};

function config(): Record<string, unknown> {
  const c = baseConfig() as { tenants: Array<{ applications: unknown[] }> };
  c.tenants[0]!.applications.push({
    id: 'aaaaaaaa-0000-4000-8000-000000000031', name: 'pci-lister', type: 'private', keys: [LISTER.key],
    permissions: ['token:create', 'token:read', 'token:search'], rules: LISTER.rules,
  });
  return c;
}

const card = (number: string, extra: Record<string, unknown> = {}) => ({ type: 'card', data: { number, expiration_month: 12, expiration_year: 2030 }, ...extra });
const ids = (r: { body: { data: Array<{ id: string }> } }) => r.body.data.map((x) => x.id);

for (const kind of await storeKinds(t)) {
  t.test(`${kind.name} store`, async (t) => {
    let s: TestService;
    t.before(async () => {
      s = await startTestService(t, { ...kind.options(), config: config() });
    });

    t.test('issue 31 finding 1: a fingerprint matches only tokens the key may read', async (t) => {
      const pci = await s.call('POST', '/tokens', { body: card(VISA) });
      t.equal(pci.status, 201);
      t.same(pci.body.containers, ['/pci/high/']);

      // The reproduction: the guess created where the key reads, its fingerprint searched.
      const guess = await s.call('POST', '/tokens', { key: LISTER.key, body: card(VISA, { containers: ['/general/guess/'] }) });
      t.equal(guess.status, 201);
      const fp = guess.body.fingerprint as string;
      t.type(fp, 'string', 'the key sees the fingerprint of a token it may read');
      t.equal(fp, pci.body.fingerprint, 'the same number has the same fingerprint');

      const listed = await s.call('GET', `/tokens?fingerprint=${encodeURIComponent(fp)}&size=100`, { key: LISTER.key });
      t.equal(listed.status, 200);
      t.same(ids(listed), [guess.body.id], 'GET /tokens?fingerprint= finds only the token it may read');
      const inPci = await s.call('GET', `/tokens?fingerprint=${encodeURIComponent(fp)}&container=/pci/`, { key: LISTER.key });
      t.same(ids(inPci), [], 'also under a container filter');
      for (const path of ['/tokens/search', '/v2/tokens/search']) {
        const searched = await s.call('POST', path, { key: LISTER.key, body: { query: `fingerprint:${fp}`, size: 100 } });
        t.equal(searched.status, 200);
        t.same(ids(searched), [guess.body.id], `POST ${path} {"query": "fingerprint:…"} likewise`);
      }
      const get = await s.call('GET', `/tokens/search?query=${encodeURIComponent(`fingerprint:${fp} type:card`)}`, { key: LISTER.key });
      t.same(ids(get), [guess.body.id], 'GET /tokens/search likewise');

      // A wrong guess answers the same shape: only the key's own guess.
      const wrong = await s.call('POST', '/tokens', { key: LISTER.key, body: card(MC, { containers: ['/general/guess/'] }) });
      const miss = await s.call('GET', `/tokens?fingerprint=${encodeURIComponent(wrong.body.fingerprint)}`, { key: LISTER.key });
      t.same(ids(miss), [wrong.body.id]);

      // What the key may see without a fingerprint is unchanged: the /pci/ token, redacted.
      const all = await s.call('GET', `/tokens?id=${pci.body.id}`, { key: LISTER.key });
      t.same(ids(all), [pci.body.id], 'the key still lists /pci/ tokens');
      t.notOk('data' in all.body.data[0] || 'fingerprint' in all.body.data[0], 'redacted, without a fingerprint');

      // A key that reads /pci/ still finds it by fingerprint.
      const owner = await s.call('GET', `/tokens?fingerprint=${encodeURIComponent(fp)}&size=100`);
      t.ok(ids(owner).includes(pci.body.id), 'a key that reads the token finds it');
      t.ok(ids(owner).includes(guess.body.id));
    });

    t.test('issue 31 finding 1: pages of a fingerprint filter stay full', async (t) => {
      // Tokens the key may not read, with the fingerprint, between ones it may read.
      const number = '4000056655665556';
      const readable: string[] = [];
      for (let i = 0; i < 3; i++) {
        await s.call('POST', '/tokens', { body: card(number) });
        const r = await s.call('POST', '/tokens', { key: LISTER.key, body: card(number, { containers: ['/general/pages/'] }) });
        readable.unshift(r.body.id);
        await s.call('POST', '/tokens', { body: card(number) });
      }
      const fp = (await s.call('POST', '/tokens', { key: LISTER.key, body: card(number, { containers: ['/general/other/'] }) })).body;
      readable.unshift(fp.id);
      const got: string[] = [];
      let start: string | null = null;
      for (let page = 0; page < 10; page++) {
        const q = new URLSearchParams({ fingerprint: fp.fingerprint, size: '2' });
        if (start) q.set('start', start);
        const r = await s.call('GET', `/tokens?${q}`, { key: LISTER.key });
        t.equal(r.status, 200);
        start = r.body.pagination.next;
        if (start !== null) t.equal(r.body.data.length, 2, `page ${page} is full`);
        got.push(...ids(r));
        if (start === null) break;
      }
      t.same(got, readable, 'every readable token once, newest first, and nothing else');
    });

    t.test('issue 31 finding 10: cursors are opaque, authenticated and bound to the tenant and query', async (t) => {
      for (let i = 0; i < 3; i++) t.equal((await s.call('POST', '/tokens', { body: { type: 'token', data: `page-${i}`, metadata: { cursor: 'yes' } } })).status, 201);
      const first = await s.call('GET', '/tokens?metadata.cursor=yes&size=1');
      t.equal(first.status, 200);
      const next = first.body.pagination.next as string;
      t.type(next, 'string');
      t.notMatch(Buffer.from(next.replace(/[^A-Za-z0-9_-]/g, ''), 'base64url').toString('latin1'), /^s\d+$/, 'not a plain sequence number');
      t.notMatch(next, /^[A-Za-z0-9_-]{1,32}$/, 'not the old base64 of a sequence');

      // Another tenant's activity does not show in the caller's cursors: B creates 7 tokens, and
      // A's next cursor from the same place still opens the same next page.
      for (let i = 0; i < 7; i++) await s.call('POST', '/tokens', { key: KEYS.tenantB, body: { type: 'token', data: `b-${i}` } });
      const again = await s.call('GET', '/tokens?metadata.cursor=yes&size=1');
      t.same(ids(again), ids(first), 'the same first page');
      const p2a = await s.call('GET', `/tokens?metadata.cursor=yes&size=1&start=${encodeURIComponent(next)}`);
      const p2b = await s.call('GET', `/tokens?metadata.cursor=yes&size=1&start=${encodeURIComponent(again.body.pagination.next)}`);
      t.equal(p2a.status, 200);
      t.same(ids(p2a), ids(p2b), 'both cursors open the same page');
      t.equal(p2a.body.data.length, 1);

      const refused = async (what: string, key: string, path: string) => {
        const r = await s.call('GET', path, { key });
        t.equal(r.status, 400, `${what}: 400`);
        t.equal(r.body.code, 'invalid_cursor', `${what}: invalid_cursor`);
        t.notOk(r.text.includes(next), `${what}: the cursor is not echoed`);
      };
      await refused("another tenant's cursor", KEYS.tenantB, `/tokens?metadata.cursor=yes&size=1&start=${encodeURIComponent(next)}`);
      await refused('the cursor of another query', KEYS.private, `/tokens?metadata.cursor=no&size=1&start=${encodeURIComponent(next)}`);
      await refused('a forged sequence cursor', KEYS.private, `/tokens?size=1&start=${Buffer.from('s5').toString('base64url')}`);
      await refused('a forged sequence cursor in a search', KEYS.private, `/tokens/search?query=type:token&start=${Buffer.from('s999999').toString('base64url')}`);
      const flipped = next.slice(0, -2) + (next.endsWith('AA') ? 'BB' : 'AA');
      await refused('a cursor with a changed byte', KEYS.private, `/tokens?metadata.cursor=yes&size=1&start=${encodeURIComponent(flipped)}`);

      // Paging still walks the whole listing, for list and search alike.
      const walk = async (path: (start: string | null) => string) => {
        const out: string[] = [];
        let start: string | null = null;
        for (let i = 0; i < 10; i++) {
          const r = await s.call('GET', path(start));
          t.equal(r.status, 200, r.text);
          out.push(...ids(r));
          start = r.body.pagination.next;
          if (start === null) break;
        }
        return out;
      };
      const listedAll = await walk((st) => `/tokens?metadata.cursor=yes&size=1${st ? `&start=${encodeURIComponent(st)}` : ''}`);
      const searchedAll = await walk((st) => `/tokens/search?query=metadata.cursor:yes&size=2${st ? `&start=${encodeURIComponent(st)}` : ''}`);
      t.equal(listedAll.length, 3, 'three pages of one');
      t.same(searchedAll, listedAll, 'the search pages the same tokens');
    });

    t.test('issue 31 finding 11: a custom id may not hold a card number', async (t) => {
      for (const id of [MC, VISA, `order-${VISA}`, 'ref-4242-4242-4242-4242', 'x5555555555554444y']) {
        const r = await s.call('POST', '/tokens', { body: { type: 'token', data: 'x', id } });
        t.equal(r.status, 400, `${id}: 400`);
        t.equal(r.body.code, 'validation_failed');
        t.ok(r.body.errors?.id, 'on the id field');
        t.notOk(r.text.includes(id), 'the id is not echoed');
        const z = await s.call('POST', '/tokenize', { body: { a: { type: 'token', data: 'x', id } } });
        t.equal(z.status, 400, `${id} in /tokenize: 400`);
        t.ok(z.body.errors?.['a.id']);
      }
      const notLuhn = await s.call('POST', '/tokens', { body: { type: 'token', data: 'x', id: 'order-4242424242424241' } });
      t.equal(notLuhn.status, 201, 'a digit run that is no card number is an ordinary id');
      const short = await s.call('POST', '/tokens', { body: { type: 'token', data: 'x', id: 'order-000123' } });
      t.equal(short.status, 201);
    });
  });
}
