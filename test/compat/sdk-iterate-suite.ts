/**
 * The original's Node SDK iterating token lists and the audit log to their end (issue 28, part B):
 * `tokens.listV2` with and without its `metadata` filter (sent as `metadata=<JSON>`), `logs.list`
 * paged the SDK's way (`page=2, 3, …` until a page comes back empty), its `entityId` and date
 * filters, `logs.getEntityTypes`; and the raw answers checked against the SDK's own response schemas.
 * (SDK 5.7.0 has no v1 `tokens.list`: `listV2` is its only token list call.) Run on every store:
 * sdk-iterate.test.ts (embedded), sdk-iterate-redis.test.ts and sdk-iterate-postgres.test.ts.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { Test } from 'tap';
import { baseConfig, KEYS, startTestService, TENANT_A, type StartTestOptions, type TestService } from '../helpers/service.js';
import { sdkClient } from '../helpers/sdk.js';
import { randomMarker } from '../helpers/secrets.js';

const MGMT = 'iterate_mgmt_key_gggggggggggggggggg';

interface ParseResult {
  ok: boolean;
  errors?: Array<{ path: string[]; message: string }>;
}
interface SdkSchema {
  parse(raw: unknown, opts: Record<string, unknown>): ParseResult;
}
const require = createRequire(import.meta.url);
const sdkDir = dirname(require.resolve('@basis-theory/node-sdk'));
const serialization = require(join(sdkDir, 'serialization', 'index.js')) as Record<string, SdkSchema>;

/** The SDK's response schema with its validation on (the SDK itself parses with skipValidation). */
function conforms(t: Test, schema: string, body: unknown, what: string): void {
  const r = serialization[schema]!.parse(body, { unrecognizedObjectKeys: 'passthrough', allowUnrecognizedUnionMembers: false, allowUnrecognizedEnumValues: false, skipValidation: false });
  t.ok(r.ok, `${what} matches the SDK's ${schema}`, { errors: r.errors });
}

function config(): Record<string, unknown> {
  const c = baseConfig();
  const tenants = c.tenants as Array<{ id: string; applications: unknown[] }>;
  tenants.find((x) => x.id === TENANT_A)!.applications.push({ id: '6a4f8e62-0000-4000-8000-0000000000a1', name: 'auditor', type: 'management', keys: [MGMT], permissions: ['log:read'] });
  return c;
}

/** Every event of the log by the cursor, newest first (what the SDK's page iteration must match). */
async function walkLogs(s: TestService, query = ''): Promise<Array<Record<string, unknown>>> {
  const out: Array<Record<string, unknown>> = [];
  let start: string | null = null;
  for (;;) {
    const page = await s.call('GET', `/logs?size=100${query}${start ? `&start=${encodeURIComponent(start)}` : ''}`, { key: MGMT });
    if (page.status !== 200) throw new Error(page.text);
    out.push(...(page.body.data as Array<Record<string, unknown>>));
    start = page.body.pagination.next;
    if (start === null) return out;
  }
}

export function sdkIterateSuite(t: Test, store: (t: Test) => Promise<StartTestOptions>): void {
  t.test('tokens.listV2 and logs.list iterate to the end, filtered', async (t) => {
    const s = await startTestService(t, { ...(await store(t)), config: config() });
    const tokens = sdkClient(s.url, KEYS.private);
    const batches = [randomMarker('a'), randomMarker('b')];
    const byBatch = new Map<string, Set<string>>(batches.map((b) => [b, new Set()]));
    // 300 tokens in three /tokenize calls of 100: 150 in each metadata batch, interleaved.
    for (let call = 0; call < 3; call++) {
      const body: Record<string, unknown> = {};
      for (let i = 0; i < 100; i++) body[`k${i}`] = { type: 'token', data: `v-${call}-${i}`, metadata: { batch: batches[i % 2]!, n: String(i) } };
      const out = await s.call('POST', '/tokenize', { body });
      if (out.status !== 200) throw new Error(`tokenize: ${out.text}`);
      for (let i = 0; i < 100; i++) byBatch.get(batches[i % 2]!)!.add((out.body as Record<string, { id: string }>)[`k${i}`]!.id);
    }
    const all = new Set([...byBatch.values()].flatMap((x) => [...x]));
    t.equal(all.size, 300);

    const listed: string[] = [];
    const before = tokens.requests.length;
    for await (const token of await tokens.client.tokens.listV2({ size: 100 })) listed.push(token.id!);
    t.equal(listed.length, 300, 'listV2 yields every token');
    t.same(new Set(listed), all, 'each once');
    t.equal(tokens.requests.length - before, 3, 'three full pages: the last says next: null, no empty page is asked for');

    const found: string[] = [];
    const beforeSearch = tokens.requests.length;
    for await (const token of await tokens.client.tokens.searchV2({ query: `metadata.batch:${batches[1]}`, size: 50 })) found.push(token.id!);
    t.same(new Set(found), byBatch.get(batches[1]!), 'searchV2 yields the batch');
    t.equal(found.length, 150, 'each once');
    t.equal(tokens.requests.length - beforeSearch, 3, 'in three pages of 50, then it stops');

    for (const [batch, ids] of byBatch) {
      const before = tokens.requests.length;
      const got: string[] = [];
      const others: string[] = [];
      for await (const token of await tokens.client.tokens.listV2({ metadata: { batch }, size: 40 })) {
        got.push(token.id!);
        if (token.metadata?.batch !== batch) others.push(token.id!);
      }
      t.same(others, [], 'only the batch asked for');
      t.equal(got.length, 150, 'listV2({ metadata }) yields the whole batch');
      t.same(new Set(got), ids, 'each once, none of the other batch');
      t.equal(tokens.requests.length - before, 4, 'pages are full: 150 in 40s is four pages, then it stops');
    }
    const two: string[] = [];
    for await (const token of await tokens.client.tokens.listV2({ metadata: { batch: batches[0]!, n: '4' } })) two.push(token.id!);
    t.equal(two.length, 3, 'every given key must match (one n=4 in batch a per /tokenize call)');
    const none: string[] = [];
    for await (const token of await tokens.client.tokens.listV2({ metadata: { batch: 'no-such-batch' } })) none.push(token.id!);
    t.same(none, [], 'no match: an empty list, and the iterator stops');

    // The raw answers of the token list against the SDK's schema, and the metadata form it sends on /tokens too.
    const raw = await s.call('GET', `/v2/tokens?metadata=${encodeURIComponent(JSON.stringify({ batch: batches[1] }))}&size=100`);
    t.equal(raw.status, 200, 'GET /v2/tokens?metadata=<JSON>');
    conforms(t, 'TokenCursorPaginatedList', raw.body, 'a /v2/tokens page');
    const v1 = await s.call('GET', `/tokens?metadata=${encodeURIComponent(JSON.stringify({ batch: batches[1] }))}&metadata.n=5&size=100`);
    t.equal(v1.status, 200, 'GET /tokens?metadata=<JSON>&metadata.n=5');
    t.equal(v1.body.data.length, 3, 'GET /tokens: the JSON form and metadata.<key> combine');
    const both = (json: object, dotted: string) => s.call('GET', `/v2/tokens?metadata=${encodeURIComponent(JSON.stringify(json))}&${dotted}`);
    t.equal((await both({ n: '5' }, 'metadata.n=5')).body.data?.length, 3, 'a key in both forms with one value: one filter');
    const clash = await both({ n: '5' }, 'metadata.n=6');
    t.same([clash.status, clash.body.code, Object.keys(clash.body.errors ?? {})], [400, 'validation_failed', ['metadata']], 'a key in both forms with two values: 400 naming metadata');
    const proto = await s.call('GET', `/v2/tokens?metadata=${encodeURIComponent('{"__proto__":"x","constructor":"y"}')}`);
    t.same([proto.status, proto.body.data], [200, []], 'metadata keys are data, never object members');
    for (const bad of ['not-json', '[1]', '{"batch":1}', '"x"']) {
      const r = await s.call('GET', `/v2/tokens?metadata=${encodeURIComponent(bad)}`);
      t.equal(r.status, 400, `metadata=${bad}: 400`);
      t.equal(r.body.code, 'validation_failed');
      t.ok(r.body.errors?.metadata, 'naming metadata');
    }

    // Audit events: one reveal per token read with a reveal key; one detokenize naming two tokens.
    const [x, y] = [...byBatch.get(batches[0]!)!];
    const reads = [...all].slice(0, 23);
    for (const id of reads) if ((await s.call('GET', `/tokens/${id}`)).status !== 200) throw new Error('read failed');
    const detok = await s.call('POST', '/detokenize', { body: { a: `{{ token: ${x} }}`, b: `{{ token: ${y} }}` } });
    t.equal(detok.status, 200, 'detokenize of two tokens');

    const everything = await walkLogs(s);
    t.ok(everything.length >= 24, `the log holds the reveals (${everything.length} events)`);
    const logs = sdkClient(s.url, MGMT);
    const seen: string[] = [];
    for await (const entry of await logs.client.logs.list({ size: 5 })) seen.push(entry.id!);
    t.equal(seen.length, everything.length, 'logs.list({ size: 5 }) yields every event');
    t.equal(new Set(seen).size, seen.length, 'each once');
    t.same(seen, everything.map((e) => e.id), 'in the order of the cursor walk, newest first');
    t.equal(logs.requests.length, Math.ceil(everything.length / 5) + 1, 'one page per 5, then one empty page (how the SDK learns the end), then it stops');

    const yEvents = everything.filter((e) => (e.token_ids as string[]).includes(y!));
    t.ok(yEvents.length >= 1);
    const ofY: Array<{ entityId?: string; entityType?: string }> = [];
    for await (const entry of await logs.client.logs.list({ entityId: y!, entityType: 'token', size: 5 })) ofY.push(entry);
    t.equal(ofY.length, yEvents.length, 'logs.list({ entityId }): every event naming the token');
    t.ok(ofY.every((e) => e.entityId === y && e.entityType === 'token'), 'and each entry is about that entity (the detokenize named two)');

    // Dates: the bounds are inclusive; taken from the events themselves (no clock in the test).
    const times = everything.map((e) => e.created_at as string);
    const mid = times[Math.floor(times.length / 2)]!;
    const upTo: string[] = [];
    for await (const entry of await logs.client.logs.list({ endDate: new Date(mid), size: 7 })) upTo.push(entry.id!);
    t.same(upTo, everything.filter((e) => Date.parse(e.created_at as string) <= Date.parse(mid)).map((e) => e.id), 'endDate: events at or before it');
    const from: string[] = [];
    for await (const entry of await logs.client.logs.list({ startDate: new Date(mid), size: 7 })) from.push(entry.id!);
    t.same(from, everything.filter((e) => Date.parse(e.created_at as string) >= Date.parse(mid)).map((e) => e.id), 'startDate: events at or after it');
    const future: string[] = [];
    for await (const entry of await logs.client.logs.list({ startDate: new Date(Date.parse(times[0]!) + 3_600_000) })) future.push(entry.id!);
    t.same(future, [], 'nothing after the last event');

    t.same(await logs.client.logs.getEntityTypes(), [{ displayName: 'Token', value: 'token' }], 'logs.getEntityTypes: the trail records tokens');
    const types = await s.call('GET', '/logs/entity-types', { key: MGMT });
    t.ok(Array.isArray(types.body) && types.body.every((x: unknown) => serialization.LogEntityType!.parse(x, { skipValidation: false }).ok), 'each matches the SDK\'s LogEntityType');
    const first = await s.call('GET', '/logs?size=5', { key: MGMT });
    conforms(t, 'LogPaginatedList', first.body, 'a /logs page');
    const second = await s.call('GET', '/logs?size=5&page=2', { key: MGMT });
    t.equal(second.status, 200, 'GET /logs?page=2');
    conforms(t, 'LogPaginatedList', second.body, 'a /logs page by number');
    t.same(second.body.data.map((e: { id: string }) => e.id), everything.slice(5, 10).map((e) => e.id), 'page 2 is the next five');
    t.equal(second.body.pagination.page_number, 2);
    const deepest = await s.call('GET', '/logs?size=100&page=1001', { key: MGMT });
    t.same([deepest.status, deepest.body.data], [200, []], 'page numbers go 100,000 events deep (past the end here: empty)');
    const next = await s.call('GET', `/logs?size=5&start=${encodeURIComponent(first.body.pagination.next)}`, { key: MGMT });
    t.same(next.body.data, second.body.data, 'the cursor and page 2 agree');
    for (const [q, field] of [['start_date=yesterday', 'start_date'], ['end_date=2026-13-45', 'end_date'], ['page=0', 'page'], ['page=x', 'page'], ['page=1.5', 'page'], ['page=0x2', 'page'], ['page=2e0', 'page'], ['size=0x10', 'size'], ['size=100&page=1002', 'page']] as const) {
      const r = await s.call('GET', `/logs?${q}`, { key: MGMT });
      t.equal(r.status, 400, `${q}: 400`);
      t.equal(r.body.code, 'validation_failed');
      t.ok(r.body.errors?.[field], `naming ${field}`);
    }
  });
}
