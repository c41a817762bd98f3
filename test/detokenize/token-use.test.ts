/**
 * token:use through access rules, on a running service's Detokenizer (the one the outbound proxy
 * and transforms call): allowed and denied per container, the first matching rule decides, plain
 * permissions apply everywhere, all or nothing, one audit event per use with the destination
 * origin only.
 */
import t from 'tap';
import type { Principal } from '../../src/auth/keys.js';
import { buildModel } from '../../src/model/compile.js';
import { ExpressionScan, type ExpressionUses } from '../../src/detokenize/expressions.js';
import { ServiceError } from '../../src/errors.js';
import { randomCard } from '../helpers/secrets.js';
import { startTestService } from '../helpers/service.js';

const TENANT = '99999999-9999-4999-8999-999999999999';
const OTHER = '99999999-9999-4999-8999-999999999998';
const CREATOR = 'use_creator_key_aaaaaaaaaaaaaaaaaaa';
const crud = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search'];
const app = (n: number, permissions: string[], rules: unknown[] = [], key = `use_app_${n}_key_bbbbbbbbbbbbbbbbb`) => ({
  id: `dddddddd-0000-4000-8000-00000000000${n}`, name: `app${n}`, type: 'private', keys: [key], permissions, rules,
});
const raw = {
  server: { host: '127.0.0.1', port: 0 },
  rate_limits: { enabled: false },
  tenants: [
    {
      id: TENANT, name: 'use',
      applications: [
        app(1, crud, [{ priority: 1, container: '/', transform: 'reveal', permissions: crud }], CREATOR),
        // plain permission, no rules: every container
        app(2, ['token:use']),
        // first matching prefix decides: /pci/high/ is denied although /pci/ would allow
        app(3, [], [
          { priority: 1, container: '/pci/high/', transform: 'reveal', permissions: ['token:read'] },
          { priority: 2, container: '/pci/', transform: 'mask', permissions: ['token:use'] },
        ]),
        // no token:use anywhere
        app(4, ['token:read']),
      ],
    },
    { id: OTHER, name: 'other', applications: [app(5, ['token:use'])] },
  ],
};
const { model } = buildModel(raw, { env: {} });
const principal = (tenant: number, n: number): Principal => {
  const tc = model.tenants[tenant]!;
  const a = tc.applications.find((x) => x.name === `app${n}`)!;
  return { tenant: tc, app: a, keyId: `k${n}`, kind: 'private' };
};

t.test('token:use per container through the rules; all or nothing; audited', async (t) => {
  const s = await startTestService(t, { config: raw });
  const number = randomCard();
  const made = await s.call('POST', '/tokenize', {
    key: CREATOR,
    body: {
      low: { type: 'card', containers: ['/pci/low/'], data: { number, expiration_month: 1, expiration_year: 2030 } },
      high: { type: 'token', containers: ['/pci/high/'], data: 'high-secret' },
      general: { type: 'token', containers: ['/general/'], data: 'general-secret' },
    },
  });
  t.equal(made.status, 200, made.text);
  const [low, high, general] = [made.body.low.id, made.body.high.id, made.body.general.id] as string[];
  const d = s.svc.detokenizer;
  const audit = { action: 'proxy.outbound' as const, destination: 'https://api.example.com:8443/v1/charges?secret=1', requestId: 'req-1' };
  const uses = (ids: string[]): ExpressionUses => ({ ids, filtersOf: () => new Set(['json']) });
  const code = async (p: Principal, ids: string[]) => d.resolveForUse(p, uses(ids), audit).then(() => 'ok', (e: unknown) => (e instanceof ServiceError ? e.code : String(e)));

  t.equal(await code(principal(0, 2), [low, high, general]), 'ok', 'plain token:use: every container');
  t.equal(await code(principal(0, 3), [low]), 'ok', '/pci/low/ through the /pci/ rule');
  t.equal(await code(principal(0, 3), [high]), 'forbidden', '/pci/high/: the first matching rule lacks token:use');
  t.equal(await code(principal(0, 3), [general]), 'forbidden', 'no rule matches /general/');
  t.equal(await code(principal(0, 3), [low, high]), 'forbidden', 'one refused token fails the whole request');
  t.equal(await code(principal(0, 4), [low]), 'forbidden', 'token:read is not token:use');
  t.equal(await code(principal(1, 5), [low]), 'unknown_token', "another tenant's token is unknown");
  t.equal(await code(principal(0, 2), [low, 'missing-id']), 'unknown_token');

  const body = { pan: `{{ ${low} | json: '$.number' }}`, whole: `{{ token: ${high} | json: '$.type' }}` };
  const scan = new ExpressionScan().json(body);
  const resolved = await d.resolveForUse(principal(0, 2), scan, { ...audit, requestId: 'req-2' });
  t.same((await scan.render(resolved)).json(body), { pan: number, whole: 'token' });
  t.same(await d.resolveForUse(principal(0, 2), uses([]), audit), { tokens: new Map(), detailed: true }, 'no ids: nothing resolved, nothing audited');

  // Three successful uses: three events, destination as an origin only; none for the refusals.
  const page = await s.svc.store.audit.listAudit(TENANT, {}, { size: 100, after: null });
  t.same(page.items.map((e) => [e.request_id, e.application_id, e.token_ids.length, e.destination, e.action]).reverse(), [
    ['req-1', principal(0, 2).app.id, 3, 'https://api.example.com:8443', 'proxy.outbound'],
    ['req-1', principal(0, 3).app.id, 1, 'https://api.example.com:8443', 'proxy.outbound'],
    ['req-2', principal(0, 2).app.id, 2, 'https://api.example.com:8443', 'proxy.outbound'],
  ]);
  t.notMatch(JSON.stringify(page.items), number);
  t.notMatch(JSON.stringify(page.items), /secret/);
  t.same((await s.svc.store.audit.listAudit(OTHER, {}, { size: 100, after: null })).items, []);

  // List and search answers under a reveal rule are reveals too: one event naming what was shown.
  const listed = await s.call('GET', '/tokens?size=2', { key: CREATOR });
  t.equal(listed.status, 200, listed.text);
  const searched = await s.call('POST', '/tokens/search', { key: CREATOR, body: { query: 'type:card' } });
  t.equal(searched.body.data.length, 1);
  const reveals = (await s.svc.store.audit.listAudit(TENANT, {}, { size: 100, after: null })).items.filter((e) => e.action === 'token.reveal');
  t.same(reveals.map((e) => e.token_ids).reverse(), [listed.body.data.map((r: { id: string }) => r.id), [low]]);

  // A PATCH answer carries the record as a read does: under a reveal rule it is a reveal as well.
  const patched = await s.call('PATCH', `/tokens/${general}`, { key: CREATOR, body: { metadata: { k: 'v' } }, headers: { 'content-type': 'application/merge-patch+json' } });
  t.equal(patched.status, 200, patched.text);
  t.ok(patched.body.data !== undefined, 'the answer carries the data (a reveal rule)');
  const after = (await s.svc.store.audit.listAudit(TENANT, {}, { size: 1, after: null })).items;
  t.same(after.map((e) => [e.action, e.token_ids]), [['token.reveal', [general]]], 'the PATCH answer is audited');
});
