/** store/audit.ts on its own: the chain, what verifyChain reports for each kind of tampering. */
import t from 'tap';
import { chain, decodeEvent, encodeEvent, eventHash, GENESIS_HASH, verifyChain, type AuditEvent, type AuditHead } from '../../src/store/audit.js';

const TENANT = 't-1';
const inputs = Array.from({ length: 5 }, (_, i) => ({
  tenant_id: TENANT, application_id: 'app', action: 'token.reveal' as const, token_ids: [`id${i}`], destination: null,
  request_id: `r${i}`, created_at: new Date(Date.UTC(2030, 0, 1, 0, i)).toISOString(),
}));

async function* of(events: Array<AuditEvent | null>): AsyncGenerator<AuditEvent | null> {
  yield* events;
}

t.test('chain links every event to the one before; verifyChain finds the first bad one', async (t) => {
  const { events, head } = chain(null, inputs);
  t.equal(events[0]!.prev_hash, GENESIS_HASH);
  for (let i = 1; i < events.length; i++) t.equal(events[i]!.prev_hash, eventHash(events[i - 1]!));
  t.same(head, { seq: 5, hash: eventHash(events[4]!) });
  const more = chain(head, inputs.slice(0, 1));
  t.same(more.events[0]!.seq, 6, 'continues from a head');
  t.same(await verifyChain(of(events), head, TENANT), { ok: true, events: 5 });
  t.same(await verifyChain(of([]), null, TENANT), { ok: true, events: 0 });

  const check = async (list: Array<AuditEvent | null>, h: AuditHead | null = head) => {
    const r = await verifyChain(of(list), h, TENANT);
    return r.ok ? 'ok' : r.position;
  };
  const edited = events.map((e) => ({ ...e }));
  edited[1]!.token_ids = ['other'];
  t.equal(await check(edited), 3, 'an edited event: its successor no longer links to it');
  t.equal(await check([events[0]!, events[2]!, events[1]!, events[3]!, events[4]!]), 2, 'reordered');
  t.equal(await check([events[0]!, events[1]!, events[3]!, events[4]!]), 3, 'removed in the middle');
  t.equal(await check(events.slice(0, 4)), 5, 'the last removed: the head counts one more');
  t.equal(await check([...events.slice(0, 4), { ...events[4]!, request_id: 'x' }]), 5, 'the last edited: the head hash differs');
  t.equal(await check([events[0]!, null, ...events.slice(2)]), 2, 'an entry that does not decode');
  t.equal(await check([{ ...events[0]!, tenant_id: 'other' }, ...events.slice(1)]), 1, "another tenant's event");
  t.equal(await check(events, null), 1, 'events without a head');
  t.equal(await check(events.slice(1), { seq: 5, hash: head.hash }), 1, 'the first removed');

  t.same(decodeEvent(encodeEvent(events[2]!)), events[2]);
  t.equal(decodeEvent('{"seq":"1"}'), null);
  t.equal(decodeEvent('not json'), null);
});
