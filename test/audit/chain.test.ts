/** store/audit.ts and crypto/audit-anchor.ts on their own: the chain, the anchor, what verifyChain reports for each kind of tampering. */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { anchorMatches, anchorSigner, formatHead, parseHead } from '../../src/crypto/audit-anchor.js';
import {
  chain, decodeEvent, encodeEvent, eventHash, GENESIS_HASH, verifyChain, type AuditEvent, type AuditHead, type StoredAuditHead, type VerifyOptions,
} from '../../src/store/audit.js';

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
  const noAnchor: VerifyOptions = { anchor: null };
  const stored = (h: AuditHead): StoredAuditHead => ({ ...h, anchor: null });
  t.same(await verifyChain(of(events), stored(head), TENANT, noAnchor), { ok: true, events: 5, unanchored: false });
  t.same(await verifyChain(of([]), null, TENANT, noAnchor), { ok: true, events: 0, unanchored: false });

  const check = async (list: Array<AuditEvent | null>, h: AuditHead | null = head) => {
    const r = await verifyChain(of(list), h && stored(h), TENANT, noAnchor);
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

t.test('the anchor: a head the store writer made up, an anchor removed, a rollback past --expect-head', async (t) => {
  const sign = anchorSigner(randomBytes(32));
  const opts: VerifyOptions = { anchor: (tenant, h, a) => anchorMatches(sign, tenant, h, a) };
  const { events, head } = chain(null, inputs);
  const anchored = (h: AuditHead): StoredAuditHead => ({ ...h, anchor: sign(TENANT, h) });
  const verdict = async (list: AuditEvent[], h: StoredAuditHead | null, o: VerifyOptions = opts) => {
    const r = await verifyChain(of(list), h, TENANT, o);
    return r.ok ? (r.unanchored ? 'unanchored' : 'ok') : r.reason;
  };
  t.equal(await verdict(events, anchored(head)), 'ok');

  // The store writer's moves: each leaves a chain that links, with the head moved to match it.
  const truncated = events.slice(0, 2);
  const truncatedHead = { seq: 2, hash: eventHash(events[1]!) };
  t.match(await verdict(truncated, { ...truncatedHead, anchor: anchored(head).anchor }), /anchor of the chain head does not match/, 'the tail deleted, the head rewritten');
  const forged = chain(null, [inputs[1]!, inputs[0]!, ...inputs.slice(2)]);
  t.match(await verdict(forged.events, { ...forged.head, anchor: anchored(head).anchor }), /does not match/, 'reordered, every hash recomputed');
  t.match(await verdict(truncated, { ...truncatedHead, anchor: null }), /carries no anchor/, 'the anchor removed');
  t.equal(await verdict(truncated, { ...truncatedHead, anchor: null }, { ...opts, allowUnanchored: true }), 'unanchored', '--allow-unanchored: accepted, flagged');
  t.match(await verdict(events, { ...head, anchor: anchorSigner(randomBytes(32))(TENANT, head) }), /not the master key/, 'another master key');
  t.not(sign('other-tenant', head), sign(TENANT, head), "one tenant's anchor is not another's");

  // A rollback to an old head that was validly anchored: only an expected head shows it.
  t.equal(await verdict(truncated, anchored(truncatedHead)), 'ok', 'an old, validly anchored head');
  t.match(await verdict(truncated, anchored(truncatedHead), { ...opts, expect: head }), /ends at event 2, before the expected head/);
  t.equal(await verdict(events, anchored(head), { ...opts, expect: truncatedHead }), 'ok', 'a successor of the expected head');
  t.match(await verdict(forged.events, anchored(forged.head), { ...opts, expect: truncatedHead }), /event 2 is not the expected head/, 'a replaced trail');

  // The head as logged and given back: base64url (the log censors long digit runs), hex accepted.
  const text = formatHead(head);
  t.match(text, /^5:[A-Za-z0-9_-]{43}$/);
  t.same(parseHead(text), head);
  t.same(parseHead(`5:${head.hash}`), head, 'hex, as prev_hash shows it');
  for (const bad of ['', '5', '0:' + head.hash, `5:${head.hash}0`, 'x:y', `-1:${head.hash}`]) t.equal(parseHead(bad), null, JSON.stringify(bad));
});
