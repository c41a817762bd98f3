/**
 * The token port's contract (store/types.ts TokenPort), run by contract.ts against every backend
 * (embedded.test.ts, redis.test.ts, postgres.test.ts). `makeStore(t)` returns a fresh, empty store
 * and registers its own teardown on `t`; only its token port is used here.
 */
import type { Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { DuplicateTokenError, type Store, type StoredToken, type TokenFilter, type TokenPort } from '../../src/store/types.js';
import { InvalidCursorError } from '../../src/store/factory.js';

export const TENANT_A = '11111111-1111-4111-8111-111111111111';
export const TENANT_B = '22222222-2222-4222-8222-222222222222';
const HOUR = 3_600_000;
const iso = (offsetMs: number): string => new Date(Date.now() + offsetMs).toISOString();

let counter = 0;
export function makeRecord(over: Partial<StoredToken> = {}): StoredToken {
  counter++;
  return {
    tenant_id: TENANT_A, id: `tok-${counter}-${randomUUID()}`, type: 'token', container: '/general/high/',
    sealed: `v1.k1.sealed-${counter}`, cvc_sealed: null, cvc_expires_at: null, metadata: {}, search_indexes: [],
    index_hashes: [], fingerprint: null, fingerprint_expression: null, mask: null, created_by: 'app-1',
    created_at: new Date().toISOString(), modified_by: null, modified_at: null, expires_at: null, ...over,
  };
}

async function caught(p: Promise<unknown>): Promise<unknown> {
  return p.then(() => null, (err: unknown) => err);
}

async function ids(store: TokenPort, filter: TokenFilter, tenant = TENANT_A): Promise<string[]> {
  return (await store.list(tenant, filter, { size: 100, after: null })).items.map((r) => r.id);
}

/** Inserts the records with deduplication; per record the id of the token matched, or null when written. */
async function dedupeIds(store: TokenPort, records: StoredToken[]): Promise<(string | null)[]> {
  return (await store.insertMany(records, { dedupe: records.map(() => true) })).map((r) => r?.id ?? null);
}

export function runTokensContract(t: Test, makeStore: (t: Test) => Promise<Store>): void {
  t.test('insertMany then get / getMany return the records as written', async (t) => {
    const s = await makeStore(t);
    const card = makeRecord({
      type: 'card', container: '/pci/high/', cvc_sealed: 'v1.k1.cvc', cvc_expires_at: iso(HOUR), metadata: { 'a:b': 'c=d', ü: 'ñ' },
      search_indexes: ['{{ data.number | last4 }}'], index_hashes: ['h1'], fingerprint: 'fp1', fingerprint_expression: '{{ data.number }}',
      mask: '{{ data.number | reveal_last: 4 }}', expires_at: iso(HOUR), id: 'custom:id/with spaces',
    });
    const plain = makeRecord();
    await s.tokens.insertMany([card, plain]);
    t.same(await s.tokens.get(TENANT_A, card.id), card);
    t.same(await s.tokens.get(TENANT_A, plain.id), plain);
    t.equal(await s.tokens.get(TENANT_A, 'missing'), null);
    t.same((await s.tokens.getMany(TENANT_A, [plain.id, 'missing', card.id, plain.id])).map((r) => r.id), [plain.id, card.id], 'input order, missing dropped');
    t.same(await s.tokens.getMany(TENANT_A, []), []);
    await s.tokens.insertMany([]);
  });

  t.test('insertMany is all or nothing', async (t) => {
    const s = await makeStore(t);
    const existing = makeRecord();
    await s.tokens.insertMany([existing]);
    const a = makeRecord();
    const b = makeRecord();
    const inBatch = await caught(s.tokens.insertMany([a, b, { ...makeRecord(), id: a.id }]));
    t.ok(inBatch instanceof DuplicateTokenError, 'duplicate inside the batch');
    t.equal(inBatch instanceof DuplicateTokenError && inBatch.id, a.id);
    const c = makeRecord();
    const vsStored = await caught(s.tokens.insertMany([c, { ...makeRecord(), id: existing.id }]));
    t.ok(vsStored instanceof DuplicateTokenError, 'duplicate of a stored id');
    t.equal(vsStored instanceof DuplicateTokenError && vsStored.id, existing.id);
    t.equal(await s.tokens.get(TENANT_A, a.id), null);
    t.equal(await s.tokens.get(TENANT_A, c.id), null);
    t.same(await ids(s.tokens, {}), [existing.id], 'only the first record exists');
    t.same(await s.tokens.get(TENANT_A, existing.id), existing, 'the stored record was not overwritten');
  });

  t.test('concurrent batches are independent: a failing one takes no other down (group commit)', async (t) => {
    const s = await makeStore(t);
    const existing = makeRecord();
    await s.tokens.insertMany([existing]);
    const ok1 = [makeRecord(), makeRecord()];
    const bad = [makeRecord(), { ...makeRecord(), id: existing.id }];
    const ok2 = [makeRecord()];
    // Issued in one turn of the event loop: the embedded store commits them as one group.
    const results = await Promise.allSettled([s.tokens.insertMany(ok1), s.tokens.insertMany(bad), s.tokens.insertMany(ok2)]);
    t.same(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
    const reason = results[1]!.status === 'rejected' ? results[1]!.reason : null;
    t.ok(reason instanceof DuplicateTokenError, 'the bad batch fails with its duplicate');
    t.equal(await s.tokens.get(TENANT_A, bad[0]!.id), null, "the bad batch's other record was not written");
    for (const r of [...ok1, ...ok2]) t.same(await s.tokens.get(TENANT_A, r.id), r, 'the good batches were written');
  });

  t.test('update replaces the record and its indexes, keeps its position', async (t) => {
    const s = await makeStore(t);
    const first = makeRecord({ metadata: { k: 'old' }, index_hashes: ['old'], fingerprint: 'fp-old' });
    const second = makeRecord();
    await s.tokens.insertMany([first, second]);
    const changed = { ...first, metadata: { k: 'new' }, index_hashes: ['new'], fingerprint: 'fp-new', modified_by: 'app-2', modified_at: iso(0) };
    t.equal(await s.tokens.update(changed), true);
    t.same(await s.tokens.get(TENANT_A, first.id), changed);
    t.same(await ids(s.tokens, { metadata: { k: 'old' } }), []);
    t.same(await ids(s.tokens, { metadata: { k: 'new' } }), [first.id]);
    t.same(await ids(s.tokens, { index_hashes: ['old'] }), []);
    t.same(await ids(s.tokens, { index_hashes: ['new'] }), [first.id]);
    t.same(await ids(s.tokens, { fingerprint: 'fp-old' }), []);
    t.same(await ids(s.tokens, { fingerprint: 'fp-new' }), [first.id]);
    t.same(await ids(s.tokens, {}), [second.id, first.id], 'order by creation, not by update');
    t.same(await dedupeIds(s.tokens, [makeRecord({ fingerprint: 'fp-new' })]), [first.id], 'the new fingerprint deduplicates to the patched token');
    t.same(await dedupeIds(s.tokens, [makeRecord({ fingerprint: 'fp-old', id: 'old-fp' })]), [null], 'the old one to nothing');
    await s.tokens.delete(TENANT_A, 'old-fp');
    t.equal(await s.tokens.update(makeRecord()), false, 'missing id');
    t.equal(await s.tokens.update({ ...changed, tenant_id: TENANT_B }), false, 'other tenant');
  });

  t.test('delete removes the record and its index entries', async (t) => {
    const s = await makeStore(t);
    const r = makeRecord({ metadata: { m: '1' }, index_hashes: ['h'], fingerprint: 'fp', cvc_sealed: 'c', cvc_expires_at: iso(HOUR) });
    await s.tokens.insertMany([r]);
    t.equal(await s.tokens.delete(TENANT_B, r.id), false, 'other tenant cannot delete it');
    t.equal(await s.tokens.delete(TENANT_A, r.id), true);
    t.equal(await s.tokens.get(TENANT_A, r.id), null);
    t.same(await ids(s.tokens, { metadata: { m: '1' } }), []);
    t.same(await ids(s.tokens, { index_hashes: ['h'] }), []);
    t.same(await ids(s.tokens, { fingerprint: 'fp' }), []);
    t.same(await dedupeIds(s.tokens, [makeRecord({ fingerprint: 'fp', id: 'after-delete' })]), [null], 'a deleted token is not matched');
    await s.tokens.delete(TENANT_A, 'after-delete');
    t.equal(await s.tokens.purgeCvc(new Date(Date.now() + 2 * HOUR)), 0, 'its cvc is gone too');
    t.equal(await s.tokens.delete(TENANT_A, r.id), false, 'second delete');
    await s.tokens.insertMany([r]);
    t.same(await s.tokens.get(TENANT_A, r.id), r, 'the id can be used again');
  });

  t.test('tenants are isolated', async (t) => {
    const s = await makeStore(t);
    const a = makeRecord({ id: 'shared-id', fingerprint: 'fp', index_hashes: ['h'], metadata: { m: 'v' } });
    const b = { ...a, tenant_id: TENANT_B, sealed: 'v1.k1.other' };
    await s.tokens.insertMany([a]);
    await s.tokens.insertMany([b]);
    t.same(await s.tokens.get(TENANT_A, 'shared-id'), a);
    t.same(await s.tokens.get(TENANT_B, 'shared-id'), b);
    t.same(await ids(s.tokens, {}, TENANT_B), ['shared-id']);
    t.same(await dedupeIds(s.tokens, [{ ...makeRecord({ fingerprint: 'fp' }), tenant_id: TENANT_B }]), ['shared-id'], 'deduplicates within B');
    t.equal(await s.tokens.delete(TENANT_A, 'shared-id'), true);
    t.same(await s.tokens.get(TENANT_B, 'shared-id'), b, 'B untouched by A');
    t.same(await ids(s.tokens, { index_hashes: ['h'], metadata: { m: 'v' } }, TENANT_B), ['shared-id']);
    t.same(await ids(s.tokens, {}, TENANT_A), []);
  });

  t.test('every filter', async (t) => {
    const s = await makeStore(t);
    const r1 = makeRecord({ type: 'card', container: '/pci/high/', fingerprint: 'f1', metadata: { a: '1', b: '2' }, index_hashes: ['x', 'y'] });
    const r2 = makeRecord({ type: 'token', container: '/pci/low/', fingerprint: 'f2', metadata: { a: '1' }, index_hashes: ['x'] });
    const r3 = makeRecord({ type: 'token', container: '/pcidss/', metadata: { a: '10' }, index_hashes: ['y', 'y'] });
    await s.tokens.insertMany([r1, r2, r3]);
    t.same(await ids(s.tokens, {}), [r3.id, r2.id, r1.id], 'newest first');
    t.same(await ids(s.tokens, { type: 'card' }), [r1.id]);
    t.same(await ids(s.tokens, { type: 'token' }), [r3.id, r2.id]);
    t.same(await ids(s.tokens, { container: '/pci/' }), [r2.id, r1.id], 'prefix, segment-aware');
    t.same(await ids(s.tokens, { container: '/pci/high/' }), [r1.id]);
    t.same(await ids(s.tokens, { container: '/' }), [r3.id, r2.id, r1.id]);
    t.same(await ids(s.tokens, { fingerprint: 'f2' }), [r2.id]);
    t.same(await ids(s.tokens, { metadata: { a: '1' } }), [r2.id, r1.id]);
    t.same(await ids(s.tokens, { metadata: { a: '1', b: '2' } }), [r1.id], 'every pair must match');
    t.same(await ids(s.tokens, { metadata: { b: '1' } }), []);
    t.same(await ids(s.tokens, { metadata: {} }), [r3.id, r2.id, r1.id]);
    t.same(await ids(s.tokens, { index_hashes: ['x'] }), [r2.id, r1.id]);
    t.same(await ids(s.tokens, { index_hashes: ['x', 'y'] }), [r1.id], 'every hash must match');
    t.same(await ids(s.tokens, { index_hashes: ['y', 'y'] }), [r3.id, r1.id], 'repeated hashes');
    t.same(await ids(s.tokens, { index_hashes: ['z'] }), []);
    t.same(await ids(s.tokens, { ids: [r1.id, r3.id, 'missing'] }), [r3.id, r1.id]);
    t.same(await ids(s.tokens, { ids: [] }), [], 'an empty id list matches nothing');
    t.same(await ids(s.tokens, { type: 'token', container: '/pci/', metadata: { a: '1' }, index_hashes: ['x'], fingerprint: 'f2', ids: [r2.id] }), [r2.id]);
    t.same(await ids(s.tokens, { type: 'card', index_hashes: ['x'], ids: [r2.id] }), []);
  });

  t.test('pagination: newest first, stable cursor while tokens are inserted', async (t) => {
    const s = await makeStore(t);
    const all: StoredToken[] = [];
    for (let batch = 0; batch < 5; batch++) {
      const rs = Array.from({ length: 5 }, () => makeRecord({ metadata: { even: String(all.length % 2 === 0) } }));
      rs.forEach((r, i) => (r.metadata = { even: String((all.length + i) % 2 === 0) }));
      await s.tokens.insertMany(rs);
      all.push(...rs);
    }
    const expected = all.map((r) => r.id).reverse();
    const seen: string[] = [];
    let after: string | null = null;
    let pages = 0;
    do {
      const page = await s.tokens.list(TENANT_A, {}, { size: 10, after });
      seen.push(...page.items.map((r) => r.id));
      after = page.next;
      pages++;
      await s.tokens.insertMany([makeRecord()]); // newer tokens never shift the pages still to come
    } while (after !== null);
    t.same(seen, expected);
    t.equal(pages, 3);
    const evens: string[] = [];
    after = null;
    do {
      const page = await s.tokens.list(TENANT_A, { metadata: { even: 'true' } }, { size: 4, after });
      t.ok(page.items.length <= 4);
      evens.push(...page.items.map((r) => r.id));
      after = page.next;
    } while (after !== null);
    t.same(evens, all.filter((r) => r.metadata.even === 'true').map((r) => r.id).reverse(), 'filtered pages');
    const exact = await s.tokens.list(TENANT_A, { ids: expected.slice(0, 4) }, { size: 2, after: null });
    const last = await s.tokens.list(TENANT_A, { ids: expected.slice(0, 4) }, { size: 2, after: exact.next });
    t.same([...exact.items, ...last.items].map((r) => r.id), expected.slice(0, 4));
    t.equal(last.next, null, 'no next when the page ends exactly at the last match');
    for (const bad of ['garbage', '', 'czl', Buffer.from('x9').toString('base64url'), Buffer.from('s-1').toString('base64url'), Buffer.from('s01').toString('base64url'), 'a.b']) {
      t.ok((await caught(s.tokens.list(TENANT_A, {}, { size: 10, after: bad }))) instanceof InvalidCursorError, `cursor ${JSON.stringify(bad)}`);
    }
    for (const size of [0, 101, 1.5]) t.ok((await caught(s.tokens.list(TENANT_A, {}, { size, after: null }))) instanceof RangeError, `size ${size}`);
  });

  t.test('expired tokens are invisible', async (t) => {
    const s = await makeStore(t);
    const old = makeRecord({ fingerprint: 'fp', expires_at: iso(-1000), index_hashes: ['h'] });
    const live = makeRecord({ fingerprint: 'fp', expires_at: iso(HOUR), index_hashes: ['h'] });
    await s.tokens.insertMany([old, live]);
    t.equal(await s.tokens.get(TENANT_A, old.id), null);
    t.same((await s.tokens.getMany(TENANT_A, [old.id, live.id])).map((r) => r.id), [live.id]);
    t.same(await ids(s.tokens, { index_hashes: ['h'] }), [live.id]);
    t.same(await dedupeIds(s.tokens, [makeRecord({ fingerprint: 'fp' })]), [live.id], 'deduplicates to the oldest live, not the oldest');
    t.equal(await s.tokens.update({ ...old, metadata: { x: 'y' } }), false);
    t.equal(await s.tokens.delete(TENANT_A, old.id), false);
  });

  t.test('cvc: hidden after expiry, purged by purgeCvc', async (t) => {
    const s = await makeStore(t);
    const due = makeRecord({ cvc_sealed: 'cvc-due', cvc_expires_at: iso(-1000) });
    const later = makeRecord({ cvc_sealed: 'cvc-later', cvc_expires_at: iso(HOUR) });
    const forever = makeRecord({ cvc_sealed: 'cvc-forever' });
    await s.tokens.insertMany([due, later, forever]);
    t.equal((await s.tokens.get(TENANT_A, due.id))?.cvc_sealed, null, 'hidden before any purge');
    t.equal((await s.tokens.get(TENANT_A, later.id))?.cvc_sealed, 'cvc-later');
    t.equal(await s.tokens.purgeCvc(new Date()), 1);
    t.equal(await s.tokens.purgeCvc(new Date()), 0, 'idempotent');
    t.equal(await s.tokens.purgeCvc(new Date(Date.now() + 2 * HOUR)), 1, 'purges by the given time');
    t.equal((await s.tokens.get(TENANT_A, later.id))?.cvc_sealed, null, 'really removed, not just hidden');
    t.equal((await s.tokens.get(TENANT_A, forever.id))?.cvc_sealed, 'cvc-forever', 'no expiry, never purged');
    t.same((await s.tokens.get(TENANT_A, due.id))?.sealed, due.sealed, 'the rest of the record stays');
  });

  t.test('deduplicating inserts: the oldest live token of the tenant, type, container and fingerprint', async (t) => {
    const s = await makeStore(t);
    const first = makeRecord({ fingerprint: 'same' });
    const second = makeRecord({ fingerprint: 'same' });
    const card = makeRecord({ fingerprint: 'same', type: 'card' });
    const elsewhere = makeRecord({ fingerprint: 'same', container: '/general/low/' });
    t.same(await dedupeIds(s.tokens, [first]), [null], 'nothing to match: written');
    await s.tokens.insertMany([second, card, elsewhere]);
    t.same(await dedupeIds(s.tokens, [makeRecord({ fingerprint: 'same' })]), [first.id], 'the oldest');
    t.same(await dedupeIds(s.tokens, [makeRecord({ fingerprint: 'same', type: 'card' })]), [card.id], 'by type');
    t.same(await dedupeIds(s.tokens, [makeRecord({ fingerprint: 'same', container: '/general/low/' })]), [elsewhere.id], 'by container');
    t.same(await dedupeIds(s.tokens, [makeRecord({ fingerprint: 'same', container: '/general/' })]), [null], 'containers are exact, not prefixes');
    t.same(await dedupeIds(s.tokens, [{ ...makeRecord({ fingerprint: 'same' }), tenant_id: TENANT_B }]), [null], 'by tenant');
    await s.tokens.delete(TENANT_A, first.id);
    t.same(await dedupeIds(s.tokens, [makeRecord({ fingerprint: 'same' })]), [second.id], 'the next oldest once the first is gone');
    const before = (await ids(s.tokens, {})).length;
    const returned = await s.tokens.insertMany([makeRecord({ fingerprint: 'same' })], { dedupe: [true] });
    t.same(returned[0], await s.tokens.get(TENANT_A, second.id), 'the matched token is returned whole');
    t.equal((await ids(s.tokens, {})).length, before, 'and nothing is written');
    t.same(await s.tokens.insertMany([makeRecord({ fingerprint: 'same' })]), [null], 'without dedupe: written');
  });

  t.test('deduplicating inserts within one batch, and a duplicate id still fails the batch', async (t) => {
    const s = await makeStore(t);
    const a = makeRecord({ fingerprint: 'b1' });
    const b = makeRecord({ fingerprint: 'b1' });
    const c = makeRecord({ fingerprint: 'b2' });
    t.same(await dedupeIds(s.tokens, [a, b, c]), [null, a.id, null], 'the second matches the first of the batch');
    t.same(await ids(s.tokens, {}), [c.id, a.id]);
    const plainFirst = makeRecord({ fingerprint: 'b1' });
    const matched = await s.tokens.insertMany([plainFirst, makeRecord({ fingerprint: 'b1' })], { dedupe: [false, true] });
    t.same(matched.map((r) => r?.id ?? null), [null, a.id], 'a stored token wins over an earlier record of the batch');
    await s.tokens.delete(TENANT_A, plainFirst.id);
    const existing = makeRecord();
    await s.tokens.insertMany([existing]);
    const d = makeRecord({ fingerprint: 'b3' });
    const err = await caught(s.tokens.insertMany([d, { ...makeRecord({ fingerprint: 'b1' }), id: existing.id }, makeRecord()], { dedupe: [true, false, true] }));
    t.ok(err instanceof DuplicateTokenError, 'a duplicate id among the records written');
    t.equal(await s.tokens.get(TENANT_A, d.id), null, 'nothing written');
    const deduped = await s.tokens.insertMany([{ ...makeRecord({ fingerprint: 'b1' }), id: existing.id }], { dedupe: [true] });
    t.equal(deduped[0]?.id, a.id, 'a record that deduplicates is not written, so its id does not conflict');
  });

  t.test('deduplicating inserts are atomic: concurrent identical inserts leave one token', async (t) => {
    const s = await makeStore(t);
    const records = Array.from({ length: 20 }, () => makeRecord({ fingerprint: 'race' }));
    const results = await Promise.all(records.map((rec) => s.tokens.insertMany([rec], { dedupe: [true] })));
    t.equal(results.filter((r) => r[0] === null).length, 1, 'one insert wrote');
    const stored = await ids(s.tokens, { fingerprint: 'race' });
    t.equal(stored.length, 1, 'one token');
    // issue 30: the writer's id is its own record's; a matched insert must name the stored token
    // itself (a missing id is not filled in with the expected one)
    const got = results.map((r, i) => (r[0] === null ? records[i]!.id : r[0]?.id));
    t.same(got, records.map(() => stored[0]), 'the insert that wrote stored its record; every other insert got that token');
  });

  t.test('an expired token is not matched; its successor takes its place', async (t) => {
    const s = await makeStore(t);
    const holder = makeRecord({ fingerprint: 'exp', expires_at: iso(HOUR) });
    t.same(await dedupeIds(s.tokens, [holder]), [null], 'written: it holds the fingerprint');
    t.equal(await s.tokens.update({ ...holder, expires_at: iso(-1) }), true, 'then it expires');
    const later = makeRecord({ fingerprint: 'exp' });
    t.same(await dedupeIds(s.tokens, [later]), [null], 'an expired token is not matched: written');
    t.same(await dedupeIds(s.tokens, [makeRecord({ fingerprint: 'exp' })]), [later.id], 'and matched from then on');
  });

  t.test('scope: the first prefix that starts a container decides; none: left out', async (t) => {
    const s = await makeStore(t);
    const made: Record<string, StoredToken> = {};
    for (const c of ['/a/', '/a/x/', '/a/x/y/', '/b/', '/bc/', '/c/']) {
      made[c] = makeRecord({ container: c, type: c === '/b/' ? 'card' : 'token' });
      await s.tokens.insertMany([made[c]!]);
    }
    const id = (...cs: string[]) => cs.map((c) => made[c]!.id).reverse();
    t.same(await ids(s.tokens, { scope: [{ prefix: '/a/x/', allow: false }, { prefix: '/a/', allow: true }] }), id('/a/'), 'a denial before a grant');
    t.same(await ids(s.tokens, { scope: [{ prefix: '/a/', allow: true }, { prefix: '/a/x/', allow: false }] }), id('/a/', '/a/x/', '/a/x/y/'), 'order decides');
    t.same(await ids(s.tokens, { scope: [{ prefix: '/b/', allow: true }] }), id('/b/'), 'segment-aware: /bc/ is not under /b/');
    t.same(await ids(s.tokens, { scope: [{ prefix: '/a/x/y/', allow: true }, { prefix: '/c/', allow: true }] }), id('/a/x/y/', '/c/'));
    t.same(await ids(s.tokens, { scope: [] }), [], 'an empty scope shows nothing');
    t.same(await ids(s.tokens, { scope: [{ prefix: '/', allow: false }] }), []);
    t.same(await ids(s.tokens, { scope: [{ prefix: '/', allow: true }] }), id('/a/', '/a/x/', '/a/x/y/', '/b/', '/bc/', '/c/'));
    t.same(await ids(s.tokens, { scope: [{ prefix: '/a/', allow: true }], container: '/a/x/' }), id('/a/x/', '/a/x/y/'), 'with a container filter');
    t.same(await ids(s.tokens, { scope: [{ prefix: '/a/', allow: true }], type: 'card' }), [], 'with a type filter');
    t.same(await ids(s.tokens, { scope: [{ prefix: '/b', allow: true }], type: 'card' }), id('/b/'));
    t.same(await ids(s.tokens, { scope: [{ prefix: '/a/', allow: true }], ids: [made['/b/']!.id, made['/a/']!.id] }), id('/a/'), 'with an id list');
  });

  t.test('scope: pages are full and the cursor walks past what the scope leaves out', async (t) => {
    const s = await makeStore(t);
    const seen: string[] = [];
    for (let i = 0; i < 60; i++) {
      const r = makeRecord({ container: ['/in/', '/out/', '/in/deep/', '/other/'][i % 4], metadata: { n: String(i % 3) } });
      await s.tokens.insertMany([r]);
      if (r.container.startsWith('/in/')) seen.push(r.id);
    }
    const expected = seen.reverse();
    const scope = [{ prefix: '/in/', allow: true }];
    const got: string[] = [];
    let after: string | null = null;
    do {
      const page = await s.tokens.list(TENANT_A, { scope }, { size: 7, after });
      if (page.next !== null) t.equal(page.items.length, 7, 'a page before the last is full');
      got.push(...page.items.map((r) => r.id));
      after = page.next;
    } while (after !== null);
    t.same(got, expected);
    const withMeta = await s.tokens.list(TENANT_A, { scope, metadata: { n: '0' } }, { size: 100, after: null });
    t.ok(withMeta.items.length > 0 && withMeta.items.every((r) => r.container.startsWith('/in/') && r.metadata.n === '0'));
  });
}
