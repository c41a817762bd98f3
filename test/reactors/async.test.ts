/**
 * Issue 28: asynchronous reactor calls over HTTP. POST /reactors/{id}/react-async answers at once
 * with a request id while the reactor still runs; GET /reactors/{id}/results/{requestId} answers
 * pending, then the result or the error (with its code); only the asking application reads it; a
 * result expires; the store never holds it in plaintext; the original's SDK calls both routes; a
 * shutdown records the runs it stopped. Every answer is checked against /openapi.json.
 */
import t from 'tap';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { randomBytes } from 'node:crypto';
import { BasisTheoryError } from '@basis-theory/node-sdk';
import { checkResponses } from '../helpers/openapi.js';
import { sdkClient } from '../helpers/sdk.js';
import { cardPattern, randomCard, randomCvc, randomMarker } from '../helpers/secrets.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { withStoreDb } from '../helpers/store-file.js';
import { waitFor } from '../helpers/wait.js';

const require = createRequire(import.meta.url);
const sdkDir = dirname(require.resolve('@basis-theory/node-sdk'));
interface Schema {
  parseOrThrow(raw: unknown): unknown;
}
const serializers = require(join(sdkDir, 'serialization', 'index.js')) as { AsyncReactResponse: Schema; ReactResponse: Schema };

const TENANT = '28282828-2828-4828-8828-282828282828';
const OTHER_TENANT = '28282828-0000-4000-8000-000000000000';
const CALLER = 'async_caller_key_aaaaaaaaaaaaaaaaaaa';
const OTHER = 'async_other_app_key_bbbbbbbbbbbbbbbb';
const USER = 'async_user_key_cccccccccccccccccccccc';
const FOREIGN = 'async_foreign_key_dddddddddddddddddd';
const app = (n: number) => `28282828-aaaa-4000-8000-00000000000${n}`;
const crud = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search'];

const REACTORS = [
  { id: 'echo', name: 'echo', code: 'module.exports = async function (req) { return { raw: req.args }; };' },
  { id: 'tok', name: 'tok', code: 'module.exports = async function (req) { return { raw: { ok: true }, tokenize: { t: req.args.secret } }; };' },
  // Never ends on its own: it is running for as long as its timeout (the answer comes back first).
  // It waits on a promise nothing settles rather than looping, so it holds no core for those
  // seconds (a loop did, beside two other test files on a 2-core machine); the service answers it
  // as it does a loop, reactor_timeout at the limit.
  { id: 'spin', name: 'spin', code: 'module.exports = async function () { await new Promise(() => {}); };', timeout_ms: 5_000 },
  { id: 'declined', name: 'declined', code: "module.exports = async function (req) { const e = new Error('declined ' + JSON.stringify(req.args)); e.status = 402; throw e; };" },
];

function config(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    server: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    rate_limits: { enabled: false },
    ...extra,
    tenants: [
      {
        id: TENANT,
        name: 'async',
        applications: [
          { id: app(1), name: 'caller', type: 'private', keys: [CALLER], permissions: [...crud, 'reactor:invoke'],
            rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: crud }] },
          { id: app(2), name: 'other', type: 'private', keys: [OTHER], permissions: ['reactor:invoke'] },
          // May use tokens in reactor args, may not read them.
          { id: app(3), name: 'user', type: 'private', keys: [USER], permissions: ['reactor:invoke', 'token:use'] },
        ],
        reactors: REACTORS,
      },
      {
        id: OTHER_TENANT,
        name: 'foreign',
        applications: [{ id: app(9), name: 'foreign', type: 'private', keys: [FOREIGN], permissions: ['reactor:invoke'] }],
        reactors: [REACTORS[0]],
      },
    ],
  };
}

/** The result once it is no longer pending (every answer on the way checked against the document by the service's call). */
async function settled(s: TestService, reactor: string, id: string, key = CALLER) {
  return waitFor(async () => {
    const r = await s.call('GET', `/reactors/${reactor}/results/${id}`, { key });
    return r.status === 202 ? undefined : r;
  }, { timeoutMs: 60_000, intervalMs: 50, what: `the result of ${reactor}` });
}

t.test('react-async answers at once; the result is pending, then the error or the answer', async (t) => {
  const s = await startTestService(t, { config: config() });
  await checkResponses(s);

  // The reactor waits until its 5 s timeout: the answer (and a pending read) come while it runs.
  const started = await s.call('POST', '/reactors/spin/react-async', { key: CALLER, body: { args: { a: 1 } } });
  t.equal(started.status, 202, started.text);
  t.same(serializers.AsyncReactResponse.parseOrThrow(started.body), { asyncReactorRequestId: started.body.asyncReactorRequestId }, "the SDK's strict schema");
  const id = started.body.asyncReactorRequestId as string;
  t.match(id, /^[0-9a-f-]{36}$/);
  const pending = await s.call('GET', `/reactors/spin/results/${id}`, { key: CALLER });
  t.equal(pending.status, 202, 'still running');
  t.same(pending.body, { asyncReactorRequestId: id, status: 'pending' });
  t.equal(pending.headers.get('retry-after'), '1');
  const timedOut = await settled(s, 'spin', id);
  t.equal(timedOut.status, 504, 'the error keeps its status');
  t.equal(timedOut.body.code, 'reactor_timeout', "and the reactor's error code");

  // An answer: what the synchronous call answers, tokens included.
  const ok = await s.call('POST', '/reactors/tok/react-async', { key: CALLER, body: { args: { secret: 'kept-secret' } } });
  t.equal(ok.status, 202);
  const done = await settled(s, 'tok', ok.body.asyncReactorRequestId);
  t.equal(done.status, 200, done.text);
  t.same(done.body.raw, { ok: true });
  t.match(done.body.tokens.t, /^[0-9a-f-]{36}$/, 'the tokenize ran, as the caller');
  t.same(serializers.ReactResponse.parseOrThrow(done.body), done.body, "the SDK's strict schema");
  const read = await s.call('GET', `/tokens/${done.body.tokens.t}`, { key: CALLER });
  t.equal(read.body.data, 'kept-secret', 'the token holds the value');
  const again = await s.call('GET', `/reactors/tok/results/${ok.body.asyncReactorRequestId}`, { key: CALLER });
  t.same(again.body, done.body, 'read again: the same result');

  // A thrown status passes through, with the reactor's message (no detokenized value in the args).
  const no = await s.call('POST', '/reactors/declined/react-async', { key: CALLER, body: { args: { order: 'o-1' } } });
  const declined = await settled(s, 'declined', no.body.asyncReactorRequestId);
  t.equal(declined.status, 402);
  t.equal(declined.body.code, 'reactor_error');
  t.same(declined.body.errors, { error: ['declined {"order":"o-1"}'] });

  // Refused before anything runs, as the synchronous route: unknown reactor, bad body, no permission.
  t.equal((await s.call('POST', '/reactors/nope/react-async', { key: CALLER, body: { args: 1 } })).body.code, 'not_found');
  t.equal((await s.call('POST', '/reactors/echo/react-async', { key: CALLER, body: [] })).body.code, 'validation_failed');
  const unknownToken = await s.call('POST', '/reactors/echo/react-async', { key: CALLER, body: { args: { v: '{{ 00000000-0000-4000-8000-000000000000 }}' } } });
  t.equal(unknownToken.status, 400, 'an expression naming no token is this request\'s error');
});

t.test('only the application that asked reads the result: others get the 404 of an unknown id', async (t) => {
  const s = await startTestService(t, { config: config() });
  await checkResponses(s);
  const r = await s.call('POST', '/reactors/echo/react-async', { key: CALLER, body: { args: { x: 'mine' } } });
  const id = r.body.asyncReactorRequestId as string;
  t.equal((await settled(s, 'echo', id)).status, 200);
  for (const [name, key] of [['another application of the tenant', OTHER], ['another tenant (same reactor id)', FOREIGN]] as const) {
    const got = await s.call('GET', `/reactors/echo/results/${id}`, { key });
    t.equal(got.status, 404, name);
    t.equal(got.body.code, 'reactor_result_not_found', name);
    t.notOk(got.text.includes('mine'), `${name}: nothing of the result`);
  }
  const unknown = await s.call('GET', '/reactors/echo/results/00000000-0000-4000-8000-000000000000', { key: OTHER });
  t.equal(unknown.body.code, 'reactor_result_not_found', 'the same answer as an id that was never made');
  t.equal((await s.call('GET', `/reactors/spin/results/${id}`, { key: CALLER })).body.code, 'reactor_result_not_found', 'under another reactor');
});

t.test('detokenized args: the error result carries no text of the reactor code; the store and the logs hold no card', async (t) => {
  const s = await startTestService(t, { config: config() });
  await checkResponses(s);
  const number = randomCard();
  const cvc = randomCvc();
  const made = await s.call('POST', '/tokenize', {
    key: CALLER,
    body: { card: { type: 'card', containers: ['/pci/'], data: { number, expiration_month: 4, expiration_year: 2031, cvc } } },
  });
  t.equal(made.status, 200, made.text);
  const card = made.body.card.id as string;
  // A marker for the args that no ciphertext holds by chance (a 3-byte 'o-2' was found in a WAL
  // file of a CI run: random bytes hold any 3 bytes about once in 16 MB).
  const order = randomMarker('order');
  const args = { pan: `{{ ${card} | json: '$.number' }}`, order };
  const r = await s.call('POST', '/reactors/declined/react-async', { key: USER, body: { args } });
  t.equal(r.status, 202, r.text);
  const failed = await settled(s, 'declined', r.body.asyncReactorRequestId, USER);
  t.equal(failed.status, 402);
  t.equal(failed.body.code, 'reactor_error');
  t.notMatch(failed.text, cardPattern(number), 'no card number');
  t.notOk(failed.text.includes('declined ') || failed.text.includes(order), 'no message from user code, nothing of the args');
  t.type(failed.body.error_id, 'string', 'an error id names the log line');
  // The same audit event as a synchronous call: the use of the card, by the user's application.
  const events = await s.svc.store.audit.listAudit(TENANT, { entity_id: card }, { size: 10, after: null });
  t.ok(events.items.some((e) => e.action === 'reactor.args' && e.application_id === app(3) && e.token_ids.includes(card)), 'the use is in the audit trail');

  // A card in the args (plaintext) comes back in the result: sealed in the store all the same.
  const plain = randomCard();
  const echoed = await s.call('POST', '/reactors/echo/react-async', { key: CALLER, body: { args: { pan: plain } } });
  const done = await settled(s, 'echo', echoed.body.asyncReactorRequestId);
  t.same(done.body.raw, { pan: plain }, 'the caller gets its result');
  const rows = withStoreDb(s, (db) => db.prepare('SELECT count(*) AS n FROM reactor_results').get() as { n: number });
  t.ok(rows.n >= 2, 'the results are in the store');
  const files = readdirSync(s.dataDir).filter((f) => f.startsWith('tokens.db'));
  t.ok(files.includes('tokens.db'));
  for (const f of files) {
    const raw = readFileSync(join(s.dataDir, f));
    t.equal(raw.indexOf(plain), -1, `${f} does not hold the card of the result`);
    t.equal(raw.indexOf(number), -1, `${f} does not hold the detokenized card`);
    t.equal(raw.indexOf(order), -1, `${f} does not hold the args`);
  }
  t.notMatch(s.logs(), cardPattern(plain), 'the logs hold no card');
  t.notMatch(s.logs(), cardPattern(number), 'nor the detokenized one');
});

t.test("the original's SDK: reactAsync, then results.get", async (t) => {
  const s = await startTestService(t, { config: config() });
  const { client } = sdkClient(s.url, CALLER);
  const started = await client.reactors.reactAsync('echo', { args: { hello: 'world' } });
  t.match(started.asyncReactorRequestId, /^[0-9a-f-]{36}$/);
  const result = await waitFor(async () => {
    const got = (await client.reactors.results.get('echo', started.asyncReactorRequestId!)) as Record<string, unknown>;
    return got.status === 'pending' ? undefined : got;
  }, { timeoutMs: 60_000, intervalMs: 50, what: 'the result through the SDK' });
  t.same(result, { raw: { hello: 'world' }, tokens: null });
  const other = await sdkClient(s.url, OTHER).client.reactors.results.get('echo', started.asyncReactorRequestId!).then(() => null, (e: unknown) => e);
  t.ok(other instanceof BasisTheoryError && other.statusCode === 404, 'another application: the SDK throws its 404');
});

t.test('a result expires after reactors.async_result_ttl_seconds', async (t) => {
  const s = await startTestService(t, { config: config({ reactors: { async_result_ttl_seconds: 1 } }) });
  const r = await s.call('POST', '/reactors/echo/react-async', { key: CALLER, body: { args: {} } });
  t.equal(r.status, 202);
  const id = r.body.asyncReactorRequestId as string;
  const row = withStoreDb(s, (db) => db.prepare('SELECT expires_ms FROM reactor_results WHERE id = ?').get(id) as { expires_ms: number } | undefined);
  t.ok(row, 'the entry is stored');
  const gone = await waitFor(async () => {
    const got = await s.call('GET', `/reactors/echo/results/${id}`, { key: CALLER });
    return got.status === 404 ? got : undefined;
  }, { timeoutMs: 30_000, intervalMs: 100, what: 'the result expired' });
  t.equal(gone.body.code, 'reactor_result_not_found');
  t.ok(Date.now() >= Number(row?.expires_ms ?? 0) - 1000, 'gone once its expiry passed (not before)');
});

t.test('shutdown: a run still going when the grace ends is recorded as failed, and reads so after a restart', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'tp-async-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const masterKey = randomBytes(32).toString('base64');
  const cfg = config({ server: { host: '127.0.0.1', port: 0, shutdown_grace_ms: 0 } });
  const first = await startTestService(t, { config: cfg, dataDir, masterKey });
  const r = await first.call('POST', '/reactors/spin/react-async', { key: CALLER, body: { args: {} } });
  t.equal(r.status, 202);
  const id = r.body.asyncReactorRequestId as string;
  await first.svc.close();
  const second = await startTestService(t, { config: cfg, dataDir, masterKey });
  const got = await second.call('GET', `/reactors/spin/results/${id}`, { key: CALLER });
  t.equal(got.status, 503);
  t.equal(got.body.code, 'reactor_unavailable');
  t.match(got.body.detail, /stopped before the reactor finished/);
});

t.test("react-async counts on the key's reactor rate-limit row, as /react does", async (t) => {
  const s = await startTestService(t, { config: config({ rate_limits: { enabled: true, store: 'memory' } }) });
  const sync = await s.call('POST', '/reactors/echo/react', { key: CALLER, body: { args: {} } });
  t.equal(sync.status, 200);
  const before = Number(sync.headers.get('ratelimit-remaining'));
  t.ok(Number.isInteger(before) && before > 0, `a counted answer (${before} left)`);
  const started = await s.call('POST', '/reactors/echo/react-async', { key: CALLER, body: { args: {} } });
  t.equal(started.status, 202);
  t.equal(Number(started.headers.get('ratelimit-remaining')), before - 1, 'the same counter, one point less');
});

t.test('a large body (its args serialized off the event loop, as /react) runs in the background too', async (t) => {
  const s = await startTestService(t, { config: config() });
  const big = 'x'.repeat(200 * 1024);
  const started = await s.call('POST', '/reactors/echo/react-async', { key: CALLER, body: { args: { big } } });
  t.equal(started.status, 202, started.text.slice(0, 200));
  const done = await settled(s, 'echo', started.body.asyncReactorRequestId);
  t.equal(done.status, 200);
  t.equal(done.body.raw?.big?.length, big.length, 'the whole args reached the reactor and came back');
});
