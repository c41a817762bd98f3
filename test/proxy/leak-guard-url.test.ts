/**
 * The leak guard scans the request line and headers it forwards, not only the body. A blocking
 * proxy forwarded `GET /proxy/charge?pan=<card>`, `/proxy/cards/<card>` and `X-Card-Number: <card>`
 * to the destination (whose access log keeps URLs); now `block` answers `422 leak_detected` and
 * forwards nothing, and `log` forwards and logs the count (never the digits). Percent-escaped digits
 * in the path and query are decoded once, as the destination decodes them. The alias ids a
 * request's own tokenize step drew pass, in a header as in the body; the headers the service itself
 * strips (SVC-*) are not the destination's to see and are not scanned.
 */
import t, { type Test } from 'tap';
import { startTestService, type TestService } from '../helpers/service.js';
import { rawRequest, startUpstream, type Upstream } from '../helpers/upstream.js';
import { assertProxyError, configWithProxies } from '../helpers/proxy.js';
import { cardPattern, grouped, randomCard } from '../helpers/secrets.js';
import { luhnValid } from '../../src/luhn.js';
import { waitFor } from '../helpers/wait.js';

const KEY = {
  block: 'proxy_key_url_block_0123456789',
  log: 'proxy_key_url_logpt_0123456789',
  logTok: 'proxy_key_url_logtk_0123456789',
  alias: 'proxy_key_url_alias_0123456789',
};

/** `%XX` for every character of `s`. */
const percentEscaped = (s: string) => [...s].map((c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`).join('');

/** A code transform that copies the (already tokenized) `/card` of the body into a header. */
const COPY_ALIAS = `module.exports = async function (req) {
  const { args: { body, headers } } = req;
  return { body, headers: { ...headers, 'x-card-alias': String(body.card) } };
};`;

async function start(t: Test): Promise<{ s: TestService; up: Upstream }> {
  const up = await startUpstream(t);
  const s = await startTestService(t, {
    config: configWithProxies([
      { id: 'block', name: 'block', key: KEY.block, require_auth: false, destination_url: `${up.url}/block/`, leak_guard: 'block' },
      { id: 'log', name: 'log', key: KEY.log, require_auth: false, destination_url: `${up.url}/log/`, leak_guard: 'log' },
      { id: 'logtok', name: 'logtok', key: KEY.logTok, require_auth: false, destination_url: `${up.url}/logtok/`, leak_guard: 'log',
        request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/ssn', token: { type: 'token' } }] }] },
      { id: 'alias', name: 'alias', key: KEY.alias, require_auth: false, destination_url: `${up.url}/alias/`, leak_guard: 'block',
        request_transforms: [
          { type: 'tokenize', fields: [{ pointer: '/card', token: { type: 'card_number', id: '{{ data | alias_card }}' } }] },
          { type: 'code', code: COPY_ALIAS },
        ] },
    ]),
  });
  return { s, up };
}

function logLines(s: TestService): Array<Record<string, any>> {
  return s.logs().split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

function leakLines(s: TestService): Array<Record<string, any>> {
  return logLines(s).filter((l) => typeof l.msg === 'string' && l.msg.startsWith('leak guard'));
}

/** Waits for the access line of a request (written after its leak lines). */
function settled(s: TestService, reqId: string | string[] | undefined): Promise<true> {
  return waitFor(() => logLines(s).some((l) => l.msg === 'request' && l.req_id === reqId) || undefined, { timeoutMs: 10_000, intervalMs: 5, what: `the access line of ${String(reqId)}` });
}

/** No form of any of the cards (whole, grouped, an 8-digit fragment) in `text`. */
function assertNoDigits(t: Test, text: string, what: string, cards: string[]): void {
  const found = cards.filter((c) => cardPattern(c).test(text));
  t.equal(found.length, 0, `${what}: no form of the ${cards.length} card numbers in it`);
}

t.test('regression: a blocking guard forwarded cards in the path, the query and header values', async (t) => {
  const { s, up } = await start(t);
  const cards = Array.from({ length: 10 }, () => randomCard('4'));
  const amex = randomCard('37', 15);
  const cases: Array<{ what: string; path: string; headers?: Record<string, string> }> = [
    { what: 'the query', path: `/proxy/charge?pan=${cards[0]}` },
    { what: 'the path', path: `/proxy/cards/${cards[1]}` },
    { what: 'a header value', path: '/proxy/charge', headers: { 'x-card-number': cards[2]! } },
    { what: 'a header value, grouped', path: '/proxy/charge', headers: { 'x-card-number': grouped(cards[3]!) } },
    { what: 'the query, percent-escaped', path: `/proxy/charge?pan=${percentEscaped(cards[4]!)}` },
    { what: 'the path, percent-escaped', path: `/proxy/cards/${percentEscaped(cards[5]!)}` },
    { what: 'the query, grouped by + (a form-encoded space)', path: `/proxy/charge?pan=${grouped(cards[6]!, '+')}` },
    { what: 'the query, grouped by %20', path: `/proxy/charge?pan=${grouped(cards[7]!, '%20')}` },
    { what: 'the query, beside the proxy key parameter', path: `/proxy/charge?svc-proxy-key=${KEY.block}&pan=${cards[8]}` },
    { what: 'the Cookie header', path: '/proxy/charge', headers: { cookie: `session=abc; last_card=${cards[9]}` } },
    { what: 'a 15-digit Amex in the query', path: `/proxy/charge?pan=${amex}` },
  ];
  for (const c of cases) {
    const headers = c.path.includes('svc-proxy-key=') ? { ...c.headers } : { 'svc-proxy-key': KEY.block, ...c.headers };
    for (const method of ['GET', 'POST']) {
      const r = await rawRequest(s.url, { method, path: c.path, headers, body: method === 'POST' ? '{"amount":100}' : undefined });
      assertProxyError(t, r, 422, 'leak_detected', `${method} ${c.what}:`);
      assertNoDigits(t, r.text, `${method} ${c.what}: the answer`, [...cards, amex]);
    }
  }
  t.equal(up.received.length, 0, 'nothing reached the destination');
  const blocked = leakLines(s).filter((l) => l.proxy === 'block');
  t.equal(blocked.length, cases.length * 2, 'one warning per refused request');
  t.ok(blocked.every((l) => l.action === 'blocked' && l.findings >= 1 && (l.where === 'url' || l.where === 'headers')), 'each names where the card was, and the count');
  assertNoDigits(t, s.logs(), 'the logs', [...cards, amex]);

  // What is not a card still passes: short numbers, a 13-digit millisecond timestamp, token ids
  // (UUIDs), a Luhn-invalid 16-digit number, and the SVC-* headers the service strips.
  const clean = await rawRequest(s.url, {
    method: 'GET',
    path: '/proxy/orders/12345/tokens/9e7a3130-2819-4320-90e5-f550ba3c7da4?ts=1700000000000&n=4242424242424241',
    headers: { 'svc-proxy-key': KEY.block, 'x-request-id': '9e7a3130-2819-4320-90e5-f550ba3c7da4', 'svc-trace-id': `x${cards[0]}` },
  });
  t.equal(clean.status, 200, `a request without a card passes: ${clean.text.slice(0, 200)}`);
  t.equal(up.received.length, 1, 'and is forwarded');
  t.notOk('svc-trace-id' in up.received[0]!.headers, 'the SVC-* header was stripped, not forwarded');
});

t.test('log: the request is forwarded and the finding logged, never the digits', async (t) => {
  const { s, up } = await start(t);
  const inQuery = randomCard('5');
  const inHeader = randomCard('4');
  const inPath = randomCard('4');
  // A pass-through proxy (the body streams) and one with request transforms (the body is read).
  for (const key of [KEY.log, KEY.logTok]) {
    const r = await rawRequest(s.url, {
      method: 'POST',
      path: `/proxy/cards/${inPath}?pan=${percentEscaped(inQuery)}`,
      headers: { 'svc-proxy-key': key, 'x-card-number': grouped(inHeader, '-'), 'content-type': 'application/json' },
      body: '{"amount":100}',
    });
    t.equal(r.status, 200, `log forwards: ${r.text.slice(0, 200)}`);
    await settled(s, r.headers['svc-trace-id']);
    const proxy = key === KEY.log ? 'log' : 'logtok';
    const lines = leakLines(s).filter((l) => l.proxy === proxy);
    t.equal(lines.length, 2, `${proxy}: one warning for the request line, one for the headers`);
    t.match(lines.find((l) => l.where === 'url'), { level: 40, findings: 2, action: 'forwarded' }, `${proxy}: the path and the query card counted`);
    t.match(lines.find((l) => l.where === 'headers'), { level: 40, findings: 1, action: 'forwarded' }, `${proxy}: the header card counted`);
  }
  t.equal(up.received.length, 2, 'both forwarded');
  t.ok(up.received.every((r) => r.headers['x-card-number'] === grouped(inHeader, '-')), 'unchanged (log does not alter the request)');
  assertNoDigits(t, s.logs(), 'the logs', [inQuery, inHeader, inPath]);
});

t.test("block: the request's own alias ids pass in a header; a real card beside them does not", async (t) => {
  const { s, up } = await start(t);
  const card = randomCard('4');
  const ok = await rawRequest(s.url, {
    method: 'POST', path: '/proxy/pay',
    headers: { 'svc-proxy-key': KEY.alias, 'content-type': 'application/json' },
    body: JSON.stringify({ card, amount: 12 }),
  });
  t.equal(ok.status, 200, `an alias in the body and in a header passes: ${ok.text.slice(0, 300)}`);
  t.equal(up.received.length, 1, 'forwarded');
  const sent = JSON.parse(up.received[0]!.body.toString()) as { card: string };
  t.ok(luhnValid(sent.card) && sent.card !== card, 'the body carries a Luhn-valid alias');
  t.equal(up.received[0]!.headers['x-card-alias'], sent.card, 'and so does the header the code transform set');

  // A card that is not this request's alias, in a header of the same request: blocked.
  const other = randomCard('5');
  const blocked = await rawRequest(s.url, {
    method: 'POST', path: '/proxy/pay',
    headers: { 'svc-proxy-key': KEY.alias, 'content-type': 'application/json', 'x-previous-card': other },
    body: JSON.stringify({ card: randomCard('4'), amount: 12 }),
  });
  assertProxyError(t, blocked, 422, 'leak_detected', 'a real card in a header beside the alias:');
  t.equal(up.received.length, 1, 'nothing more forwarded');
  // Another request's alias is a card to this one (as in the body).
  const replay = await rawRequest(s.url, { method: 'GET', path: `/proxy/cards/${sent.card}`, headers: { 'svc-proxy-key': KEY.alias } });
  assertProxyError(t, replay, 422, 'leak_detected', "another request's alias in the path:");
  assertNoDigits(t, s.logs(), 'the logs', [card, other]);
});
