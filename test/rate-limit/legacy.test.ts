/**
 * Spec, "Legacy rules (counter: client IP)", through HTTP, for applications marked `legacy: true`:
 * each row's default points show in a first response's RateLimit-Limit (the tenant raises the
 * non-legacy rules so the legacy one is the strictest), each row is driven to its 429 and through
 * its Block, the counter is the client IP (two keys share it, another IP does not), the rules leave
 * non-legacy applications alone, and the Portal rule is in the data but attached to no route.
 */
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { RULES, ROUTE_GROUPS, TIERS, ruleMatches } from '../../src/rate-limit/rules.js';
import { startTestService } from '../helpers/service.js';
import { client, driveRow, expectAllowed, limitedConfig, oneToken, tenant } from './http-helpers.js';

const WINDOW = 1;
const BLOCK = 3;
const block = (points: number) => ({ points, duration_seconds: WINDOW, block_seconds: BLOCK });
const HIGH = { points: 100_000 };

// Non-legacy rules raised out of the way: the legacy rule is the strictest.
const dLegacy = tenant({
  custom: { private_key: HIGH, listing_tokens: HIGH, creating_tokens: HIGH },
  apps: [{ kind: 'private', legacy: true }],
});
const xGlobal = tenant({ custom: { legacy_global: block(3) }, apps: [{ kind: 'private', legacy: true, keys: 2 }, { kind: 'private' }] });
const xSearch = tenant({ custom: { legacy_tokens_search_post: block(3) }, apps: [{ kind: 'private', legacy: true, keys: 2 }] });
const xList = tenant({ custom: { legacy_tokens_list: block(3) }, apps: [{ kind: 'private', legacy: true, keys: 2 }] });
const xCreate = tenant({ custom: { legacy_tokens_create: block(4) }, apps: [{ kind: 'private', legacy: true, keys: 2 }] });
const xPortal = tenant({
  custom: { legacy_portal: { points: 1, duration_seconds: 60, block_seconds: 60 } },
  apps: [{ kind: 'private', legacy: true }, { kind: 'management', legacy: true }, { kind: 'public', legacy: true }],
});

const s = await startTestService(t, { config: limitedConfig([dLegacy, xGlobal, xSearch, xList, xCreate, xPortal]) });
t.jobs = 6;

const missing = () => `/tokens/${randomUUID()}`;

t.test('legacy default points, as the RateLimit-Limit of a first response', async (t) => {
  const c = client(t, s.url);
  const key = dLegacy.keys[0][0];
  expectAllowed(t, await c.send('GET', missing(), { key }), 404, 1000, 999, 'global (any route):');
  expectAllowed(t, await c.send('POST', '/tokens/search', { key, body: { query: 'data:x' } }), 200, 50, 49, 'POST /tokens/search:');
  expectAllowed(t, await c.send('GET', '/tokens', { key }), 200, 100, 99, 'GET /tokens:');
  // GET /tokens/search is not the legacy "GET /tokens" rule: only the global one applies.
  expectAllowed(t, await c.send('GET', '/tokens/search?query=data:x', { key }), 200, 1000, 996, 'GET /tokens/search (global only):');
  expectAllowed(t, await c.send('POST', '/tokenize', { key, body: oneToken() }), 200, 200, 199, 'POST /tokenize:');
  expectAllowed(t, await c.send('POST', '/tokens', { key, body: oneToken() }), 201, 200, 198, 'POST /tokens (same counter):');
});

t.test('legacy global row: counted per client IP across keys and routes; Block; non-legacy apps untouched', async (t) => {
  const c = client(t, s.url);
  const [k1, k2] = xGlobal.keys[0];
  const plain = xGlobal.keys[1][0];
  const sends = [
    () => c.send('GET', missing(), { key: k1 }),
    () => c.send('GET', missing(), { key: k2 }),
    () => c.send('GET', '/tokens/search?query=data:x', { key: k1 }),
  ];
  let i = 0;
  let checkedOthers = false;
  await driveRow(t, {
    send: async () => {
      const r = await sends[i++ % sends.length]();
      if (r.status === 429 && !checkedOthers) {
        checkedOthers = true;
        // While the IP is blocked for the legacy app: a non-legacy app of the same tenant is served,
        // and the legacy key from another client IP is served.
        expectAllowed(t, await c.send('GET', missing(), { key: plain }), 404, 1000, undefined, 'non-legacy app, same IP:');
        const other = client(t, s.url, '127.0.0.2');
        expectAllowed(t, await other.send('GET', missing(), { key: k1 }), 404, 3, 2, 'legacy key, another IP:');
      }
      return r.status === 200 ? { ...r, status: 404 } : r;
    },
    okStatus: 404, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'block', blockSeconds: BLOCK },
  });
});

t.test('legacy POST /tokens/search row: Block', async (t) => {
  const c = client(t, s.url);
  const [k1, k2] = xSearch.keys[0];
  let i = 0;
  await driveRow(t, {
    send: () => c.send('POST', '/tokens/search', { key: i++ % 2 ? k1 : k2, body: { query: 'data:x' } }),
    okStatus: 200, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'block', blockSeconds: BLOCK },
  });
});

t.test('legacy GET /tokens row: Block', async (t) => {
  const c = client(t, s.url);
  const [k1, k2] = xList.keys[0];
  let i = 0;
  let checked = false;
  await driveRow(t, {
    send: async () => {
      const r = await c.send('GET', '/tokens', { key: i++ % 2 ? k1 : k2 });
      if (r.status === 429 && !checked) {
        checked = true;
        const other = await c.send('GET', '/tokens/search?query=data:x', { key: k1 });
        t.equal(other.status, 200, 'GET /tokens/search is not counted by the legacy GET /tokens rule');
      }
      return r;
    },
    okStatus: 200, points: 3, durationSeconds: WINDOW, mitigation: { kind: 'block', blockSeconds: BLOCK },
  });
});

t.test('legacy POST /tokens and POST /tokenize row: one counter, Block', async (t) => {
  const c = client(t, s.url);
  const [k1, k2] = xCreate.keys[0];
  let i = 0;
  await driveRow(t, {
    send: async () => {
      const n = i++;
      const r = await c.send('POST', n % 2 ? '/tokens' : '/tokenize', { key: n % 3 ? k1 : k2, body: oneToken() });
      return r.status === 201 ? { ...r, status: 200 } : r;
    },
    okStatus: 200, points: 4, durationSeconds: WINDOW, mitigation: { kind: 'block', blockSeconds: BLOCK },
  });
});

t.test('legacy Portal row: in the data (600 / 10 s, Block 10 s), attached to no route', async (t) => {
  t.same(TIERS.default.legacy_portal, { points: 600, durationSeconds: 10, mitigation: { kind: 'block', blockSeconds: 10 } });
  t.same(TIERS.higher.legacy_portal, TIERS.default.legacy_portal);
  const portal = RULES.find((r) => r.name === 'legacy_portal');
  t.same(portal?.match.routes, [], 'no route group');
  for (const route of ROUTE_GROUPS) {
    for (const keyKind of ['public', 'private', 'management'] as const) {
      for (const testTenant of [false, true]) {
        if (portal && ruleMatches(portal.match, { route, keyKind, testTenant, legacy: true })) t.fail(`portal matches ${route}/${keyKind}`);
      }
    }
  }

  // Through HTTP: with the Portal rule overridden to 1 point, legacy keys of every kind on every
  // route are never limited by it (a 429 would name the rule; the limit would read 1).
  const c = client(t, s.url);
  const [priv, mgmt, pub] = [xPortal.keys[0][0], xPortal.keys[1][0], xPortal.keys[2][0]];
  const created = await c.send('POST', '/tokens', { key: priv, body: oneToken() });
  const id = (created.body as { id: string }).id;
  const calls = [
    () => c.send('POST', '/tokenize', { key: priv, body: oneToken() }),
    () => c.send('POST', '/tokens', { key: priv, body: oneToken() }),
    () => c.send('GET', '/tokens', { key: priv }),
    () => c.send('GET', '/tokens/search?query=data:x', { key: priv }),
    () => c.send('POST', '/tokens/search', { key: priv, body: { query: 'data:x' } }),
    () => c.send('GET', `/tokens/${id}`, { key: priv }),
    () => c.send('PATCH', `/tokens/${id}`, { key: priv, raw: '{"metadata":{"a":"b"}}', headers: { 'content-type': 'application/merge-patch+json' } }),
    () => c.send('GET', '/applications', { key: mgmt }),
    () => c.send('GET', '/proxies', { key: mgmt }),
    () => c.send('GET', '/reactors', { key: mgmt }),
    () => c.send('POST', '/tokenize', { key: pub, body: oneToken() }),
  ];
  for (let round = 0; round < 3; round++) {
    for (const call of calls) {
      const r = await call();
      if (r.status === 429 || r.headers['ratelimit-limit'] === '1') t.fail(`portal rule counted a request: ${r.status} ${r.text}`);
      else if (r.status >= 400) t.fail(`unexpected ${r.status}: ${r.text}`);
    }
  }
  const del = await c.send('DELETE', `/tokens/${id}`, { key: priv });
  t.equal(del.status, 204);
  t.not(del.headers['ratelimit-limit'], '1');
});
