/**
 * Nothing secret leaves the process (assert on the bytes that leave): after a run of
 * proxy requests carrying a card number, its cvc, an SSN, the proxy key and the API key, with
 * successes and failures (validation error, invalid JSON, 413, 502, 504, leak block, wrong keys,
 * a 4xx of the destination), every response (status line aside: body and headers), every log
 * line and everything the upstream received is scanned for each of them. The upstream echoes
 * what it received into its answers, so whatever reached it would also come back.
 */
import { randomInt } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { freePort } from '../helpers/redis.js';
import { KEYS, startTestService } from '../helpers/service.js';
import { rawRequest, startUpstream, type RawResponse } from '../helpers/upstream.js';
import { configWithProxies } from '../helpers/proxy.js';
import { cardPattern, cvcPattern, randomCard, randomCvc } from '../helpers/secrets.js';

// Drawn per run (issue 14): values that cannot turn up by chance in ids, ports, timestamps,
// lengths or ciphertexts, so a match below is a leak and nothing else.
const CARD = randomCard('4');
const CARD_2 = randomCard('5');
const CVC = randomCvc();
const SSN = `${randomInt(100, 900)}-${randomInt(10, 100)}-${randomInt(1000, 10_000)}`;
const PROXY_KEY = 'proxy_key_secret_tok_5a1b2c3d4e5f';
const PROXY_KEY_AUTH = 'proxy_key_secret_aut_6f5e4d3c2b1a';
const PROXY_KEY_DOWN = 'proxy_key_secret_dwn_0a9b8c7d6e5f';
const PROXY_KEY_SLOW = 'proxy_key_secret_slw_1b2c3d4e5f6a';
const PROXY_KEY_BLOCK = 'proxy_key_secret_blk_2c3d4e5f6a7b';
const PROXY_KEY_PASS = 'proxy_key_secret_pas_3d4e5f6a7b8c';
const API_KEY = KEYS.private;

/** Each secret and the forms it could take once it has left (grouped, URL- or JSON-encoded). */
const [ssnA, ssnB, ssnC] = SSN.split('-');
const SECRETS: Array<[string, RegExp]> = [
  ['card', cardPattern(CARD)],
  ['second card', cardPattern(CARD_2)],
  // Four digits sit inside hex ids, ports, lengths and timestamps by chance: the cvc counts only
  // next to its field name (JSON, escaped JSON, form, URL-encoded, text), where a leak puts it.
  ['cvc', cvcPattern(CVC)],
  ['ssn', new RegExp(`${SSN}|${ssnA}%2D${ssnB}|(?<![0-9])${ssnA}-?${ssnB}-?${ssnC}(?![0-9])`)],
  ...[PROXY_KEY, PROXY_KEY_AUTH, PROXY_KEY_DOWN, PROXY_KEY_SLOW, PROXY_KEY_BLOCK, PROXY_KEY_PASS].map(
    (k, i): [string, RegExp] => [`proxy key ${i}`, new RegExp(k)],
  ),
  ['api key', new RegExp(API_KEY)],
];


t.test('no card, cvc, ssn or key leaves in a response, a log line or an upstream request', async (t) => {
  const up = await startUpstream(t);
  // An echoing destination: what it received comes back to the client.
  up.respond((r, res) => {
    const status = /\/status\/(\d{3})/.exec(r.url)?.[1];
    const body = JSON.stringify({ url: r.url, headers: r.headers, body: r.body.toString('utf8') });
    res.writeHead(status ? Number(status) : 200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-echo': r.url });
    res.end(body);
  });
  const slow = await startUpstream(t);
  slow.respond(() => {
    // Never answers.
  });
  const dead = await freePort(); // bound and released: nothing listens on it
  const tokenize = {
    type: 'tokenize', identifier: 'pay',
    fields: [
      { pointer: '/card', token: { type: 'card' } },
      { pointer: '/customer/ssn', token: { type: 'token' } },
      { pointer: '/card_number', token: { type: 'card' } },
      { pointer: '/ssn', token: { type: 'token' } },
    ],
  };
  const cfg = configWithProxies(
    [
      {
        id: 'tok', name: 'tok', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/api/`,
        request_transforms: [tokenize],
        response_transforms: [
          { type: 'append_json', location: '/card_token', value: '{{ tokens.pay.card.id }}' },
          { type: 'append_header', name: 'x-ssn-token', value: '{{ tokens.pay.customer.ssn.id }}' },
        ],
      },
      { id: 'auth', name: 'auth', key: PROXY_KEY_AUTH, destination_url: `${up.url}/auth/`, request_transforms: [tokenize] },
      { id: 'down', name: 'down', key: PROXY_KEY_DOWN, require_auth: false, destination_url: `http://127.0.0.1:${dead}/`, request_transforms: [tokenize] },
      { id: 'slow', name: 'slow', key: PROXY_KEY_SLOW, require_auth: false, timeout_ms: 300, destination_url: `${slow.url}/`, request_transforms: [tokenize] },
      { id: 'block', name: 'block', key: PROXY_KEY_BLOCK, require_auth: false, leak_guard: 'block', destination_url: `${up.url}/block/`, request_transforms: [tokenize] },
      { id: 'pass', name: 'pass', key: PROXY_KEY_PASS, destination_url: `${up.url}/pass/` },
    ],
    [],
    { body_limit_bytes: 32 * 1024 },
  );
  const s = await startTestService(t, { config: cfg });

  const card = { number: CARD, expiration_month: 12, expiration_year: 2030, cvc: CVC };
  const json = (key: string, path: string, body: unknown, extra: Record<string, string> = {}) =>
    rawRequest(s.url, { method: 'POST', path, body: JSON.stringify(body), headers: { 'svc-proxy-key': key, 'content-type': 'application/json', ...extra } });
  const responses: Array<[string, RawResponse]> = [];
  const run = async (label: string, expectStatus: number, p: Promise<RawResponse>) => {
    const r = await p;
    t.equal(r.status, expectStatus, `${label}: ${r.status} ${r.text.slice(0, 200)}`);
    responses.push([label, r]);
    return r;
  };

  // Successes.
  const ok = await run('tokenized JSON', 200, json(PROXY_KEY, '/proxy/charges', { card, customer: { ssn: SSN, name: 'Ada' }, amount: 100 }));
  t.match(ok.json, { card_token: String, body: String }, 'the echo came back with the response transform applied');
  await run('tokenized form', 200, rawRequest(s.url, {
    method: 'POST', path: '/proxy/form', body: `card_number=${CARD_2}&ssn=${SSN}&note=hi`,
    headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': 'application/x-www-form-urlencoded' },
  }));
  await run('proxy key in the query', 200, rawRequest(s.url, {
    method: 'POST', path: `/proxy/q?svc-proxy-key=${PROXY_KEY}&x=1`, body: JSON.stringify({ ssn: SSN }), headers: { 'content-type': 'application/json' },
  }));
  await run('require_auth with the API key', 200, json(PROXY_KEY_AUTH, '/proxy/a', { card }, { 'svc-api-key': API_KEY }));
  await run('pass-through with both keys', 200, rawRequest(s.url, { method: 'GET', path: `/proxy/p?svc-proxy-key=${PROXY_KEY_PASS}`, headers: { 'svc-api-key': API_KEY } }));
  await run('destination 4xx echoing the tokenized body', 400, json(PROXY_KEY, '/proxy/status/400', { card, ssn: SSN }));
  await run('destination 5xx echoing the tokenized body', 500, json(PROXY_KEY, '/proxy/status/500', { card, ssn: SSN }));

  // Failures of tokenproxy itself.
  await run('card string at a card pointer', 400, json(PROXY_KEY, '/proxy/v', { card: CARD, ssn: SSN }));
  await run('bad month next to a good card and cvc', 400, json(PROXY_KEY, '/proxy/v', { card: { ...card, expiration_month: 13 }, ssn: SSN }));
  await run('bad cvc', 400, json(PROXY_KEY, '/proxy/v', { card: { number: CARD, cvc: `${CVC}x` } }));
  await run('invalid JSON', 400, rawRequest(s.url, {
    method: 'POST', path: '/proxy/j', body: `{"card": {"number": "${CARD}", "cvc": "${CVC}"}, "ssn": "${SSN}"`,
    headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': 'application/json' },
  }));
  await run('over the body limit', 413, json(PROXY_KEY, '/proxy/big', { card, ssn: SSN, pad: 'x'.repeat(40 * 1024) }));
  await run('destination down', 502, json(PROXY_KEY_DOWN, '/proxy/d', { card, ssn: SSN }));
  await run('destination slow', 504, json(PROXY_KEY_SLOW, '/proxy/s', { card, ssn: SSN }));
  await run('leak blocked', 422, json(PROXY_KEY_BLOCK, '/proxy/b', { card, note: `also ${CARD_2}`, ssn: SSN }));
  await run('no API key', 401, json(PROXY_KEY_AUTH, '/proxy/a', { card }));
  await run('API key of another tenant', 403, json(PROXY_KEY_AUTH, '/proxy/a', { card }, { 'svc-api-key': KEYS.tenantB }));
  await run('wrong proxy key with a good API key', 401, json('proxy_key_wrong_0000000000000000', '/proxy/w', { card }, { 'svc-api-key': API_KEY }));
  await run('proxy key used as API key', 401, json(PROXY_KEY_AUTH, '/proxy/a', { card }, { 'svc-api-key': PROXY_KEY }));
  await run('API key used as proxy key', 401, json(API_KEY, '/proxy/w', { card }));
  await run('unsupported media type', 415, rawRequest(s.url, {
    method: 'POST', path: '/proxy/m', body: `card ${CARD} cvc ${CVC} ssn ${SSN}`, headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': 'text/plain' },
  }));
  await run('path refused', 400, rawRequest(s.url, { method: 'POST', path: `/proxy/a/../${CARD}`, body: JSON.stringify({ ssn: SSN }), headers: { 'svc-proxy-key': PROXY_KEY, 'content-type': 'application/json' } }));

  // Something reached the upstream, and the tokens are really there (so the scan is not vacuous).
  t.ok(up.received.length >= 6, `the upstream received ${up.received.length} requests`);
  t.equal(slow.received.length, 1, 'the slow upstream received its request');
  const list = await s.call('GET', '/tokens', { key: KEYS.masked });
  t.ok(list.body.data.length >= 4, `tokens were created (${list.body.data.length})`);

  const outputs: Array<[string, string]> = [
    ...responses.map(([label, r]): [string, string] => [`response to "${label}"`, JSON.stringify(r.headers) + '\n' + r.text]),
    ['logs', s.logs()],
    ...[...up.received, ...slow.received].map((r, i): [string, string] => [`upstream request ${i} (${r.url})`, `${r.method} ${r.url}\n${JSON.stringify(r.headers)}\n${r.body.toString('utf8')}`]),
    // The token store on disk holds the values sealed, never in the clear.
    ...readdirSync(s.dataDir).map((f): [string, string] => [`data file ${f}`, readFileSync(join(s.dataDir, f)).toString('latin1')]),
  ];
  t.ok(readdirSync(s.dataDir).length > 0, 'the store wrote files');
  t.ok(s.logs().length > 0, 'the logs are not empty');
  for (const [name, re] of SECRETS) {
    const where = outputs.filter(([, text]) => re.test(text)).map(([label]) => label);
    t.same(where, [], `the ${name} appears nowhere that left the process`);
  }
  // A sanity check that the scan sees the values where they legitimately are.
  const revealed = await s.call('GET', `/tokens/${ok.json.card_token}`, { key: API_KEY });
  t.ok(SECRETS[0]![1].test(revealed.text), 'the card pattern does match a revealed card (the scan can fail)');
  t.ok(SECRETS[2]![1].test(JSON.stringify(card)), 'the cvc pattern matches the cvc as sent');
});
