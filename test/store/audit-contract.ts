/**
 * The audit port's contract (store/types.ts AuditPort), run by contract.ts against every backend.
 */
import type { Test } from 'tap';
import { randomBytes, randomUUID } from 'node:crypto';
import { anchorSigner } from '../../src/crypto/audit-anchor.js';
import { eventHash, type AuditEvent, type AuditEventInput } from '../../src/store/audit.js';
import { checkStoredChain, storedEvents } from '../../src/audit/trail.js';
import type { Store } from '../../src/store/types.js';

export const AUDIT_TENANT = '33333333-3333-4333-8333-333333333333';
const OTHER_TENANT = '44444444-4444-4444-8444-444444444444';

export function auditInput(over: Partial<AuditEventInput> = {}): AuditEventInput {
  return {
    tenant_id: AUDIT_TENANT, application_id: 'app-1', action: 'token.reveal', token_ids: [`tok-${randomUUID()}`],
    destination: null, request_id: randomUUID(), created_at: new Date().toISOString(), ...over,
  };
}

/** The anchor signer of these tests (a service's comes from its master key). */
export const SIGN = anchorSigner(randomBytes(32));

/** The chain and the head's anchor under SIGN. */
export async function checkChain(store: Store, tenantId: string) {
  return checkStoredChain(store.audit, tenantId, { sign: SIGN, pageSize: 7 });
}

export function runAuditContract(t: Test, makeStore: (t: Test) => Promise<Store>): void {
  t.test('audit: appends are chained per tenant, the head follows, the chain verifies', async (t) => {
    const s = await makeStore(t);
    t.equal(await s.audit.auditHead(AUDIT_TENANT), null);
    t.same(await checkChain(s, AUDIT_TENANT), { ok: true, events: 0, unanchored: false });
    const first = await s.audit.appendAudit(AUDIT_TENANT, [auditInput(), auditInput({ action: 'proxy.outbound', destination: 'https://api.example.com' })], SIGN);
    const second = await s.audit.appendAudit(AUDIT_TENANT, [auditInput({ token_ids: ['a', 'b'] })], SIGN);
    const all = [...first, ...second];
    t.same(all.map((e) => e.seq), [1, 2, 3]);
    t.equal(all[0]!.prev_hash, '0'.repeat(64));
    t.equal(all[1]!.prev_hash, eventHash(all[0]!));
    t.equal(all[2]!.prev_hash, eventHash(all[1]!));
    const head = { seq: 3, hash: eventHash(all[2]!) };
    t.same(await s.audit.auditHead(AUDIT_TENANT), { ...head, anchor: SIGN(AUDIT_TENANT, head) }, 'the head carries the anchor its signer computed');
    const stored: Array<AuditEvent | null> = [];
    for await (const e of storedEvents(s.audit, AUDIT_TENANT, 2)) stored.push(e);
    t.same(stored, all, 'auditRange pages return the events as written, oldest first');
    t.same(await checkChain(s, AUDIT_TENANT), { ok: true, events: 3, unanchored: false });
    t.same(await s.audit.appendAudit(AUDIT_TENANT, [], SIGN), []);
    // Another tenant has its own chain.
    const other = await s.audit.appendAudit(OTHER_TENANT, [auditInput({ tenant_id: OTHER_TENANT })], SIGN);
    t.equal(other[0]!.seq, 1);
    t.same(await checkChain(s, OTHER_TENANT), { ok: true, events: 1, unanchored: false });
    t.same((await s.audit.listAudit(OTHER_TENANT, {}, { size: 10, after: null })).items, other);
  });

  t.test('audit: concurrent appends still form one chain', async (t) => {
    const s = await makeStore(t);
    const n = 60;
    const results = await Promise.all(Array.from({ length: n }, (_, i) => s.audit.appendAudit(AUDIT_TENANT, [auditInput({ request_id: `r${i}` })], SIGN)));
    t.same(results.flat().map((e) => e.seq).sort((a, b) => a - b), Array.from({ length: n }, (_, i) => i + 1), 'every seq once');
    t.same(await checkChain(s, AUDIT_TENANT), { ok: true, events: n, unanchored: false });
  });

  t.test('audit: listAudit is newest first, paged, filtered by token id and time', async (t) => {
    const s = await makeStore(t);
    const base = Date.parse('2030-01-01T00:00:00.000Z');
    const at = (i: number) => new Date(base + i * 60_000).toISOString();
    for (let i = 0; i < 12; i++) {
      await s.audit.appendAudit(AUDIT_TENANT, [auditInput({ token_ids: i % 3 === 0 ? ['x', `t${i}`] : [`t${i}`], created_at: at(i) })], SIGN);
    }
    const seen: number[] = [];
    let after: string | null = null;
    do {
      const page: { items: AuditEvent[]; next: string | null } = await s.audit.listAudit(AUDIT_TENANT, {}, { size: 5, after });
      t.ok(page.items.length <= 5);
      seen.push(...page.items.map((e) => e.seq));
      after = page.next;
    } while (after !== null);
    t.same(seen, [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1]);
    const x = await s.audit.listAudit(AUDIT_TENANT, { entity_id: 'x' }, { size: 2, after: null });
    t.same(x.items.map((e) => e.token_ids[1]), ['t9', 't6']);
    t.not(x.next, null);
    const x2 = await s.audit.listAudit(AUDIT_TENANT, { entity_id: 'x' }, { size: 2, after: x.next });
    t.same(x2.items.map((e) => e.token_ids[1]), ['t3', 't0']);
    t.equal(x2.next, null);
    const window = await s.audit.listAudit(AUDIT_TENANT, { start_ms: base + 2 * 60_000, end_ms: base + 4 * 60_000 }, { size: 10, after: null });
    t.same(window.items.map((e) => e.token_ids.at(-1)), ['t4', 't3', 't2'], 'inclusive bounds');
    t.same((await s.audit.listAudit(AUDIT_TENANT, { entity_id: 'nothing' }, { size: 10, after: null })), { items: [], next: null });
  });

  t.test('audit: listAudit skips matching events inside the query (GET /logs?page=N, issue 28)', async (t) => {
    const s = await makeStore(t);
    const base = Date.parse('2030-01-01T00:00:00.000Z');
    const at = (i: number) => new Date(base + i * 60_000).toISOString();
    for (let i = 0; i < 12; i++) {
      await s.audit.appendAudit(AUDIT_TENANT, [auditInput({ token_ids: i % 3 === 0 ? ['x', `t${i}`] : [`t${i}`], created_at: at(i) })], SIGN);
    }
    const seqs = async (filter: Parameters<Store['audit']['listAudit']>[1], size: number, skip: number, after: string | null = null) => {
      const page = await s.audit.listAudit(AUDIT_TENANT, filter, { size, after, skip });
      return { seqs: page.items.map((e) => e.seq), next: page.next };
    };
    t.same((await seqs({}, 5, 5)).seqs, [7, 6, 5, 4, 3], 'page 2 of 5: the next five');
    t.not((await seqs({}, 5, 5)).next, null, 'more follow');
    t.same(await seqs({}, 5, 10), { seqs: [2, 1], next: null }, 'page 3: the last two, no next');
    t.same(await seqs({}, 5, 15), { seqs: [], next: null }, 'past the end: empty (the SDK stops there)');
    const x = await seqs({ entity_id: 'x' }, 1, 1);
    t.same(x.seqs, [7], 'the skip counts matching events only (x is in events 1, 4, 7, 10)');
    t.not(x.next, null);
    t.same((await seqs({ entity_id: 'x' }, 1, 3)).seqs, [1]);
    t.equal((await seqs({ entity_id: 'x' }, 1, 3)).next, null, 'the last match: no next');
    t.same((await seqs({ entity_id: 'x' }, 2, 1)).seqs, [7, 4], 'a filtered page after a skip is full');
    t.same((await seqs({ start_ms: base + 2 * 60_000, end_ms: base + 8 * 60_000 }, 3, 3)).seqs, [6, 5, 4], 'with the date bounds (events 3..9)');
    const first = await seqs({}, 4, 0);
    t.same((await seqs({}, 3, 2, first.next)).seqs, [6, 5, 4], 'after a cursor, then the skip');
    t.same(await seqs({}, 5, 0), await seqs({}, 5, 0), 'skip 0 is the first page');
  });
}
