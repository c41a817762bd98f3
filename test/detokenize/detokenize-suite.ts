/**
 * Detokenization over real HTTP, run against each store (detokenize.test.ts, detokenize-redis.test.ts):
 * POST /detokenize (reveal, mask, redact), the original SDK's request shape, token:use for reactor
 * args, unknown / expired / deleted / other-tenant ids, the audit trail (one event per reveal and
 * use, no value in any event), GET /logs and verify-audit, and tampering with the stored chain.
 */
import type { Test } from 'tap';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, type Io } from '../../src/cli.js';
import { writeConfig } from '../helpers/process.js';
import { cvcPattern, randomCard, randomCvc } from '../helpers/secrets.js';
import type { TestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

export const TENANT = '55555555-5555-4555-8555-555555555555';
export const OTHER_TENANT = '66666666-6666-4666-8666-666666666666';
export const K = {
  creator: 'detok_creator_key_aaaaaaaaaaaaaaaa',
  user: 'detok_user_key_bbbbbbbbbbbbbbbbbbbb',
  masked: 'detok_masked_key_cccccccccccccccccc',
  redact: 'detok_redact_key_dddddddddddddddddd',
  mgmt: 'detok_mgmt_key_eeeeeeeeeeeeeeeeeeee',
  mgmtNoLog: 'detok_mgmt_nolog_key_ffffffffffffff',
  other: 'detok_other_key_gggggggggggggggggggg',
};
const id = (n: number) => `cccccccc-0000-4000-8000-00000000000${n}`;

export function detokenizeConfig(): Record<string, unknown> {
  const crud = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search'];
  return {
    server: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    rate_limits: { enabled: false },
    tenants: [
      {
        id: TENANT,
        name: 'detok',
        applications: [
          { id: id(1), name: 'creator', type: 'private', keys: [K.creator], permissions: crud,
            rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: crud }] },
          // May use (and read in plaintext) tokens under /pci/ only; elsewhere it reads masked.
          { id: id(2), name: 'user', type: 'private', keys: [K.user], permissions: ['reactor:invoke'],
            rules: [
              { priority: 1, container: '/pci/', transform: 'reveal', permissions: ['token:use', 'token:read'] },
              { priority: 2, container: '/', transform: 'mask', permissions: ['token:read'] },
            ] },
          { id: id(3), name: 'masked', type: 'private', keys: [K.masked], permissions: ['token:read'] },
          { id: id(4), name: 'redact', type: 'private', keys: [K.redact], permissions: ['token:read'],
            rules: [{ priority: 1, container: '/', transform: 'redact', permissions: ['token:read'] }] },
          { id: id(5), name: 'mgmt', type: 'management', keys: [K.mgmt], permissions: ['log:read'] },
          { id: id(6), name: 'mgmt-nolog', type: 'management', keys: [K.mgmtNoLog], permissions: [] },
        ],
        reactors: [
          { id: 'echo', name: 'echo', code: 'module.exports = async function (req) { return { raw: req.args }; };' },
        ],
      },
      {
        id: OTHER_TENANT,
        name: 'other',
        applications: [{ id: id(7), name: 'other', type: 'private', keys: [K.other], permissions: [...crud, 'token:use'] }],
      },
    ],
  };
}

export interface SuiteOptions {
  start(t: Test): Promise<TestService>;
  /** Removes the `seq`th event (1-based) of the tenant directly in the store. */
  deleteEvent(svc: TestService, tenantId: string, seq: number): Promise<void>;
  /** Rewrites the `seq`th event directly in the store with `edit` applied to its JSON. */
  editEvent(svc: TestService, tenantId: string, seq: number, edit: (json: string) => string): Promise<void>;
  /** Every stored audit event of the tenant as raw strings. */
  rawEvents(svc: TestService, tenantId: string): Promise<string[]>;
  /** The store section of a config file that reaches the same store (for verify-audit). */
  storeConfig(svc: TestService): Record<string, unknown>;
}

async function verifyAudit(svc: TestService, o: SuiteOptions, tenantId: string): Promise<{ code: number | null; out: string }> {
  const cfg = detokenizeConfig();
  // The anchor of the trail is checked under the service's master key (issue 23).
  const keyFile = join(svc.dataDir, 'verify-master.key');
  writeFileSync(keyFile, `${svc.masterKey}\n`, { mode: 0o600 });
  const path = writeConfig(svc.dataDir, { ...cfg, store: o.storeConfig(svc), secrets: { master_key_file: keyFile } }, `verify-${Math.random().toString(36).slice(2)}.json`);
  let out = '';
  const io: Io = { out: (x) => void (out += x), err: (x) => void (out += x), stdin: () => '' };
  const code = await runCli(['verify-audit', '--tenant', tenantId, '--config', path], io);
  return { code, out };
}

/**
 * Whether `text` shows `cvc` in a way no chance can: next to its field name (cvcPattern), as a whole
 * JSON string, or (for JSON text) as a whole value anywhere in it. A 4-digit cvc searched as bare
 * digits turns up by chance in card numbers, years, hex hashes and UUIDs (issue 30).
 */
function showsCvc(text: string, cvc: string): boolean {
  if (cvcPattern(cvc).test(text) || text.includes(`"${cvc}"`)) return true;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return false;
  }
  const walk = (v: unknown): boolean =>
    typeof v === 'string' || typeof v === 'number' ? String(v) === cvc
      : Array.isArray(v) ? v.some(walk)
        : v !== null && typeof v === 'object' ? Object.values(v).some(walk) : false;
  return walk(parsed);
}

export function runDetokenizeSuite(t: Test, o: SuiteOptions): void {
  t.test('POST /detokenize: reveal, mask, redact, all or nothing; audit; logs; verify-audit; tampering', async (t) => {
    const s = await o.start(t);
    const number = randomCard();
    const cvc = randomCvc();
    const secret = `s3cr3t-${randomCard().slice(0, 10)}`;
    const created = await s.call('POST', '/tokenize', {
      key: K.creator,
      body: {
        card: { type: 'card', containers: ['/pci/'], data: { number, expiration_month: 4, expiration_year: 2031, cvc } },
        note: { type: 'token', containers: ['/general/'], data: secret, mask: '{{ data | reveal_last: 2 }}' },
      },
    });
    t.equal(created.status, 200, created.text);
    const cardId = created.body.card.id as string;
    const noteId = created.body.note.id as string;

    // The original SDK's tokens.detokenize: POST /detokenize, its JSON body as given, the API key header.
    const sdk = await s.call('POST', '/detokenize', {
      key: K.creator,
      headers: { 'content-type': 'application/json', accept: 'application/json', 'user-agent': '@basis-theory/basis-theory-js/4.0.0' },
      raw: JSON.stringify({
        number: `{{ token: ${cardId} | json: '$.data.number' }}`,
        exp: `{{ ${cardId} | json: '$.expiration_month' }}/{{ ${cardId} | json: '$.expiration_year' }}`,
        month: `{{ ${cardId} | json: '$.expiration_month' }}`,
        last4: `{{ ${cardId} | json: '$.number' | last4 }}`,
        note: `{{ ${noteId} }}`,
        untouched: ['plain', 42, null, { k: '\\{{ not an expression }}' }],
      }),
    });
    t.equal(sdk.status, 200, sdk.text);
    t.same(sdk.body, {
      number, exp: '4/2031', month: 4, last4: number.slice(-4), note: secret,
      untouched: ['plain', 42, null, { k: '{{ not an expression }}' }],
    });
    t.notOk(showsCvc(sdk.text, cvc), 'POST /detokenize never shows the cvc');

    const masked = await s.call('POST', '/detokenize', { key: K.masked, body: { n: `{{ ${cardId} | json: '$.number' }}`, note: `{{ ${noteId} }}` } });
    t.equal(masked.status, 200, masked.text);
    t.same(masked.body, { n: `${'X'.repeat(number.length - 4)}${number.slice(-4)}`, note: `${'X'.repeat(secret.length - 2)}${secret.slice(-2)}` }, 'a mask rule: masked data');
    const userMix = await s.call('POST', '/detokenize', { key: K.user, body: [`{{ ${cardId} | json: '$.number' }}`, `{{ ${noteId} }}`] });
    t.same(userMix.body, [number, `${'X'.repeat(secret.length - 2)}${secret.slice(-2)}`], 'per container: reveal under /pci/, mask elsewhere');

    const refusals: Array<[string, unknown, string, number, string]> = [
      ['redact rule', { a: `{{ ${noteId} }}` }, K.redact, 403, 'forbidden'],
      ['unknown id', { a: `{{ ${cardId} }}`, b: '{{ no-such-token }}' }, K.creator, 400, 'unknown_token'],
      ['unknown filter', { a: `{{ ${cardId} | frobnicate }}` }, K.creator, 400, 'unknown_filter'],
      ['bad json path', { a: `{{ ${cardId} | json: 'number' }}` }, K.creator, 400, 'invalid_expression'],
      ['too many', { a: `{{ ${noteId} }}`.repeat(1001) }, K.creator, 400, 'too_many_expressions'],
      ['100k expressions in one string', { a: `{{ ${noteId} }}`.repeat(100_000) }, K.creator, 400, 'too_many_expressions'],
      ['no token:read at all', { a: `{{ ${noteId} }}` }, K.mgmtNoLog, 403, 'forbidden'],
      ['another tenant', { a: `{{ ${cardId} }}` }, K.other, 400, 'unknown_token'],
      ['a card number as an id', { a: `{{ ${number} }}` }, K.creator, 400, 'unknown_token'],
    ];
    for (const [name, body, key, status, code] of refusals) {
      const r = await s.call('POST', '/detokenize', { key, body });
      t.equal(r.status, status, `${name}: ${r.text.slice(0, 200)}`);
      t.equal(r.body?.code, code, name);
      t.notMatch(r.text, number, `${name}: no card number in the error`);
      t.notMatch(r.text, number.slice(-10), `${name}: not even part of it`);
      t.notMatch(r.text, secret, name);
    }

    // Expired and deleted tokens are as unknown.
    const short = await s.call('POST', '/tokens', { key: K.creator, body: { type: 'token', containers: ['/pci/'], data: 'x', expires_at: new Date(Date.now() + 3000).toISOString() } });
    t.equal(short.status, 201, short.text);
    await waitFor(async () => (await s.call('GET', `/tokens/${short.body.id}`, { key: K.masked })).status === 404, { timeoutMs: 20_000, intervalMs: 100, what: 'the token expired' });
    t.equal((await s.call('POST', '/detokenize', { key: K.creator, body: { a: `{{ ${short.body.id} }}` } })).body.code, 'unknown_token', 'expired');
    const gone = await s.call('POST', '/tokens', { key: K.creator, body: { type: 'token', containers: ['/pci/'], data: 'y' } });
    t.equal((await s.call('DELETE', `/tokens/${gone.body.id}`, { key: K.creator })).status, 204);
    t.equal((await s.call('POST', '/detokenize', { key: K.creator, body: { a: `{{ ${gone.body.id} }}` } })).body.code, 'unknown_token', 'deleted');

    // Reactor args: token:use on the container, else 403 and the reactor gets nothing.
    const react = await s.call('POST', '/reactors/echo/react', { key: K.user, body: { args: { pan: `{{ ${cardId} | json: '$.number' }}`, cvc: `{{ ${cardId} | json: '$.cvc' }}`, x: 1 } } });
    t.equal(react.status, 200, react.text);
    t.same(react.body.raw, { pan: number, cvc, x: 1 }, 'the reactor gets the card (and the retained cvc) the caller never held');
    // A large body (parsed off the main thread) is detokenized the same way.
    const filler = 'f'.repeat(100 * 1024);
    const big = await s.call('POST', '/reactors/echo/react', { key: K.user, body: { args: { filler, pan: `{{ ${cardId} | json: '$.number' }}` } } });
    t.equal(big.status, 200, big.text.slice(0, 200));
    t.same(big.body.raw, { filler, pan: number });
    const hostile = await s.call('POST', '/reactors/echo/react', { key: K.user, body: { args: { a: `{{ ${cardId} }}`.repeat(100_000) } } });
    t.equal(hostile.body?.code, 'too_many_expressions', '100k expressions in reactor args: refused before the reactor runs');
    const denied = await s.call('POST', '/reactors/echo/react', { key: K.user, body: { args: { a: `{{ ${cardId} }}`, b: `{{ ${noteId} }}` } } });
    t.equal(denied.status, 403, 'token:use is needed on every token: /general/ is not usable');
    t.equal(denied.body.code, 'forbidden');
    t.notMatch(denied.text, number);

    // GET /tokens/{id} reveals under a reveal rule (an event); a masked read does not.
    t.equal((await s.call('GET', `/tokens/${cardId}`, { key: K.creator })).body.data.number, number);
    t.equal((await s.call('GET', `/tokens/${cardId}`, { key: K.masked })).status, 200);

    // The trail: one event per reveal and use, in order, none for refused requests or masked reads.
    const logs = await s.call('GET', '/logs?size=100', { key: K.mgmt });
    t.equal(logs.status, 200, logs.text);
    const ops = (logs.body.data as Array<Record<string, unknown>>).map((e) => [e.operation, e.token_ids, e.actor]).reverse();
    t.same(ops, [
      ['token.detokenize', [cardId, noteId], { application_id: id(1) }],
      ['token.detokenize', [cardId, noteId], { application_id: id(3) }],
      ['token.detokenize', [cardId, noteId], { application_id: id(2) }],
      ['reactor.args', [cardId], { application_id: id(2) }],
      ['reactor.args', [cardId], { application_id: id(2) }],
      ['token.reveal', [cardId], { application_id: id(1) }],
    ]);
    for (const e of logs.body.data) {
      t.match(e, { tenant_id: TENANT, entity_type: 'token', destination: null, request_id: /.+/, created_at: /^\d{4}-/ });
    }
    const byEntity = await s.call('GET', `/logs?entity_id=${encodeURIComponent(noteId)}&size=2`, { key: K.mgmt });
    t.equal(byEntity.body.data.length, 2);
    t.not(byEntity.body.pagination.next, null);
    const page2 = await s.call('GET', `/logs?entity_id=${encodeURIComponent(noteId)}&size=2&start=${byEntity.body.pagination.next}`, { key: K.mgmt });
    t.equal(page2.body.data.length, 1);
    t.equal(page2.body.pagination.next, null);
    const future = await s.call('GET', `/logs?start_date=${new Date(Date.now() + 3_600_000).toISOString()}`, { key: K.mgmt });
    t.same(future.body.data, []);
    t.equal((await s.call('GET', '/logs', { key: K.mgmtNoLog })).status, 403, 'log:read is needed');
    t.equal((await s.call('GET', '/logs', { key: K.creator })).status, 403, 'management keys only');
    t.equal((await s.call('GET', '/logs?start_date=yesterday', { key: K.mgmt })).body.code, 'validation_failed');
    t.equal((await s.call('GET', '/logs?start=not-a-cursor', { key: K.mgmt })).body.code, 'invalid_cursor');
    t.equal((await s.call('GET', '/logs?entity_type=proxy', { key: K.mgmt })).body.code, 'validation_failed');
    t.equal((await s.call('GET', '/logs?color=blue', { key: K.mgmt })).body.code, 'validation_failed');
    t.equal((await s.call('GET', '/logs', { key: K.other })).status, 403);

    // No value in any stored event.
    const events = await o.rawEvents(s, TENANT);
    const raw = events.join('\n');
    t.equal(events.length, 6);
    for (const v of [number, number.slice(-8), secret]) t.notOk(raw.includes(v), 'no value in the stored trail');
    t.notOk(events.some((e) => showsCvc(e, cvc)), 'no cvc in the stored trail');
    t.notMatch(s.logs(), number, 'no card number in the logs');
    t.notOk(s.logs().includes(secret), 'no token value in the logs');

    // verify-audit: intact; then tampering with the store directly is detected.
    const ok = await verifyAudit(s, o, TENANT);
    t.equal(ok.code, 0, ok.out);
    t.match(ok.out, /6 audit event\(s\), chain intact/);
    t.equal((await verifyAudit(s, o, OTHER_TENANT)).code, 2, 'a tenant without a chain head is named, not reported intact (issue 31)');
    await o.editEvent(s, TENANT, 2, (json) => json.replace(id(3), id(4)));
    const edited = await verifyAudit(s, o, TENANT);
    t.equal(edited.code, 1, edited.out);
    t.match(edited.out, /BROKEN at event 3/, 'an edited event breaks the link of the next one');
    await o.editEvent(s, TENANT, 2, (json) => json.replace(id(4), id(3)));
    t.equal((await verifyAudit(s, o, TENANT)).code, 0, 'restored');
    await o.editEvent(s, TENANT, 6, (json) => json.replace('token.reveal', 'token.detokenize'));
    t.match((await verifyAudit(s, o, TENANT)).out, /BROKEN at event 6/, 'the last event is checked against the head');
    await o.editEvent(s, TENANT, 6, (json) => json.replace('token.detokenize', 'token.reveal'));
    await o.deleteEvent(s, TENANT, 3);
    const removed = await verifyAudit(s, o, TENANT);
    t.equal(removed.code, 1);
    t.match(removed.out, /BROKEN at event 3/, 'a removed event is detected where it was');
  });
}
