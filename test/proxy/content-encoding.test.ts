/**
 * Issue 30, README promises no test exercised (items 6 and 7), through the real service on port 0
 * and a real upstream:
 * - README "Inbound proxy", leak guard: "Compressed bodies (`Content-Encoding`) cannot be scanned:
 *   with `block` they are refused (`415`); with `log` they pass unscanned."
 * - README "Outbound proxy": "The request fails as a whole, before anything is sent, when one token
 *   is unknown (400), not usable by the key (403), expired or deleted (400)", and "A body with
 *   `Content-Encoding` is refused (`415`): it could not be read." README "Detokenization" names the
 *   code: `unknown_token` for an id of an unknown, expired or deleted token.
 * Every refusal is checked on the upstream too: it received nothing.
 */
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { baseConfig, call, startTestService } from '../helpers/service.js';
import { assertProxyError, PROXY_KEY, PROXY_KEY_2, PROXY_KEY_3, configWithProxies } from '../helpers/proxy.js';
import { randomCard } from '../helpers/secrets.js';
import { rawRequest, startUpstream } from '../helpers/upstream.js';
import { waitFor } from '../helpers/wait.js';
import { LeakScanner, scanType } from '../../src/proxy/leak-guard.js';

/**
 * A card whose gzip body, read as text, holds a Luhn-valid run of digits (deflate's fixed codes
 * turn the digits of a short JSON body into runs of other digits: about 1 random card in 120).
 * The log proxy once scanned those bytes and logged such a run as a finding; now "unscanned" is
 * checked with a body that would give one.
 */
function cardWithFalseFindingWhenGzipped(): { card: string; plain: string; gz: Buffer } {
  for (let i = 0; i < 100_000; i++) {
    const card = randomCard();
    const plain = JSON.stringify({ card, amount: 100 });
    const gz = gzipSync(plain);
    const scanner = new LeakScanner(scanType('application/json'));
    scanner.push(gz);
    if (scanner.end() > 0) return { card, plain, gz };
  }
  throw new Error('no card found whose gzip bytes read as a card');
}

const LEAK_WARNING = 'leak guard: a card number in plaintext in the body to the destination';

t.test('leak guard and Content-Encoding: block answers 415, log forwards the body unscanned', async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies([
    { id: 'blocking', name: 'blocking', key: PROXY_KEY, require_auth: false, destination_url: up.url, leak_guard: 'block' },
    { id: 'logging', name: 'logging', key: PROXY_KEY_2, require_auth: false, destination_url: up.url, leak_guard: 'log' },
    {
      id: 'tokenizing', name: 'tokenizing', key: PROXY_KEY_3, require_auth: false, destination_url: up.url, leak_guard: 'log',
      request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/card', token: { type: 'token' } }] }],
    },
  ]);
  const s = await startTestService(t, { config: cfg });
  const { card, plain, gz } = cardWithFalseFindingWhenGzipped();
  t.notOk(gz.includes(card), 'the compressed bytes do not show the card as text');
  const send = (key: string, body: string | Buffer, encoding?: string) =>
    rawRequest(s.url, {
      method: 'POST',
      path: '/proxy/charges',
      headers: { 'svc-proxy-key': key, 'content-type': 'application/json', ...(encoding ? { 'content-encoding': encoding } : {}) },
      body,
    });

  await t.test('block: a gzip body is 415 unsupported_media_type, nothing forwarded', async (t) => {
    const before = up.received.length;
    const r = await send(PROXY_KEY, gz, 'gzip');
    assertProxyError(t, r, 415, 'unsupported_media_type');
    t.equal(r.headers['svc-proxy-destination-status'], undefined, 'not an answer of the destination');
    t.equal(up.received.length, before, 'the upstream received nothing');
    // Any coding but identity, also a list: the guard cannot read it.
    const listed = await send(PROXY_KEY, gz, 'gzip, identity');
    assertProxyError(t, listed, 415, 'unsupported_media_type', 'gzip, identity:');
    t.equal(up.received.length, before, 'the upstream received nothing');
  });

  await t.test('block: the same body without compression is read and scanned (control)', async (t) => {
    const before = up.received.length;
    const identity = await send(PROXY_KEY, plain, 'identity');
    assertProxyError(t, identity, 422, 'leak_detected', 'Content-Encoding identity:');
    t.equal(up.received.length, before, 'the upstream received nothing');
  });

  await t.test('log: a gzip body is forwarded byte for byte, with its Content-Encoding, and no finding', async (t) => {
    const warnings = () => s.logs().split('\n').filter((l) => l.includes(LEAK_WARNING)).length;
    const warned = warnings();
    const before = up.received.length;
    const r = await send(PROXY_KEY_2, gz, 'gzip');
    t.equal(r.status, 200, r.text);
    t.equal(r.headers['svc-proxy-destination-status'], '200');
    t.equal(up.received.length, before + 1, 'forwarded');
    const got = up.received.at(-1)!;
    t.equal(got.headers['content-encoding'], 'gzip', 'the Content-Encoding is forwarded');
    t.ok(got.body.equals(gz), 'the compressed bytes arrive unchanged');
    t.equal(warnings(), warned, 'nothing was found: the compressed body was not decoded for the scan');
    // Control: the same proxy finds the card in the plain body (so the silence above is the encoding's).
    const control = await send(PROXY_KEY_2, plain);
    t.equal(control.status, 200, control.text);
    await waitFor(() => warnings() === warned + 1, { what: 'the leak warning of the plain body' });
    t.notOk(s.logs().includes(card), 'the card never reaches the log');
  });

  await t.test('log with a tokenize transform: a gzip body is 415 (README: "so are compressed bodies"), nothing forwarded', async (t) => {
    const before = up.received.length;
    const r = await send(PROXY_KEY_3, gz, 'gzip');
    assertProxyError(t, r, 415, 'unsupported_media_type');
    t.equal(up.received.length, before, 'the upstream received nothing');
    const control = await send(PROXY_KEY_3, plain);
    t.equal(control.status, 200, `control: the plain body is tokenized and forwarded ${control.text}`);
    t.notOk(up.received.at(-1)!.body.includes(card), 'the card was replaced by a token id');
  });
});

const USE_KEY = 'test_use_key_ffffffffffffffffffffff';
const PERMS = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search', 'proxy:invoke', 'token:use'];

t.test('outbound proxy: expired or deleted tokens are 400 unknown_token, a Content-Encoding body 415; nothing is sent', async (t) => {
  const up = await startUpstream(t);
  const cfg = baseConfig() as Record<string, any>;
  cfg.tenants[0].applications.push({
    id: 'aaaaaaaa-0000-4000-8000-0000000000a1', name: 'user', type: 'private', keys: [USE_KEY], permissions: PERMS,
    rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: PERMS }],
  });
  cfg.tenants[0].outbound = { allowed_destinations: [up.url] };
  const s = await startTestService(t, { config: cfg });
  const card = randomCard();
  const create = async (extra: Record<string, unknown> = {}) => {
    const r = await call(s.url, 'POST', '/tokens', { key: USE_KEY, body: { type: 'card', data: { number: card, expiration_month: 7, expiration_year: 2031 }, ...extra } });
    t.equal(r.status, 201, `token created ${r.text.slice(0, 200)}`);
    return r.body.id as string;
  };
  const send = (id: string, o: { raw?: string } = {}) =>
    call(s.url, 'POST', '/proxy/charges', {
      key: USE_KEY,
      raw: o.raw ?? JSON.stringify({ number: `{{ token: ${id} | json: '$.data.number' }}`, amount: 1 }),
      headers: { 'svc-proxy-url': up.url, 'content-type': 'application/json' },
    });

  const live = await create();
  const ok = await send(live);
  t.equal(ok.status, 200, `control: a live token is forwarded ${ok.text}`);
  t.same(JSON.parse(up.received.at(-1)!.body.toString()), { number: card, amount: 1 });

  await t.test('a deleted token: 400 unknown_token', async (t) => {
    const id = await create();
    const del = await call(s.url, 'DELETE', `/tokens/${id}`, { key: USE_KEY });
    t.equal(del.status, 204, del.text);
    const before = up.received.length;
    const r = await send(id);
    assertProxyError(t, r, 400, 'unknown_token');
    t.notOk(r.text.includes(id), 'the error does not repeat the id');
    t.equal(up.received.length, before, 'nothing was sent');
  });

  await t.test('an expired token: 400 unknown_token', async (t) => {
    const id = await create({ expires_at: new Date(Date.now() + 2_000).toISOString() });
    await waitFor(async () => (await call(s.url, 'GET', `/tokens/${id}`, { key: USE_KEY })).status === 404, {
      what: 'the token expired', timeoutMs: 30_000, intervalMs: 200,
    });
    const before = up.received.length;
    const r = await send(id);
    assertProxyError(t, r, 400, 'unknown_token');
    t.notOk(r.text.includes(id), 'the error does not repeat the id');
    t.equal(up.received.length, before, 'nothing was sent');
    // One bad token fails the whole request, a live one beside it included.
    const both = await send(id, { raw: JSON.stringify({ a: `{{ ${live} | json: '$.number' }}`, b: `{{ ${id} | json: '$.number' }}` }) });
    assertProxyError(t, both, 400, 'unknown_token', 'with a live token beside it:');
    t.equal(up.received.length, before, 'nothing was sent');
  });

  await t.test('a body with Content-Encoding: 415 unsupported_media_type', async (t) => {
    const before = up.received.length;
    const r = await rawRequest(s.url, {
      method: 'POST',
      path: '/proxy/charges',
      headers: { 'svc-api-key': USE_KEY, 'svc-proxy-url': up.url, 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: gzipSync(JSON.stringify({ number: `{{ token: ${live} | json: '$.data.number' }}` })),
    });
    assertProxyError(t, r, 415, 'unsupported_media_type');
    t.equal(up.received.length, before, 'nothing was sent');
  });
  t.notOk(s.logs().includes(card), 'the card never reaches the log');
});
