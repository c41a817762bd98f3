/**
 * Issue 29 ("errors that say what to do"), over HTTP on the real service: a 415 names the media
 * types the route takes; invalid_json gives the line and column where the body stops being JSON
 * (in the JSON worker too, for bodies over 64 KiB, and on a proxy's JSON transform) and says
 * "empty" for an empty body, never quoting the body; route_not_found points to /openapi.json
 * without echoing the path; POST /tokens names only the member that is missing. Each on its
 * exact text.
 */
import t, { type Test } from 'tap';
import { catalogue } from '../../src/errors.js';
import { CARD, configWithProxies, PROXY_KEY } from '../helpers/proxy.js';
import { KEYS, startTestService } from '../helpers/service.js';
import { startUpstream } from '../helpers/upstream.js';

const s = await startTestService(t);
const JSON_CT = { 'content-type': 'application/json' };

/** The problem body of an answer, after checking its status and code. */
async function problem(t: Test, pending: ReturnType<typeof s.call>, status: number, code: keyof typeof catalogue) {
  const r = await pending;
  t.equal(r.status, status, r.text);
  t.equal(r.body?.code, code, r.text);
  t.equal(r.headers.get('content-type'), 'application/problem+json');
  return r;
}

t.test('415 names the media types the route accepts', async (t) => {
  const search = await problem(t, s.call('POST', '/tokens/search', { raw: 'query', headers: { 'content-type': 'text/plain; charset=utf-8' } }), 415, 'unsupported_media_type');
  t.equal(search.body.detail, 'Content-Type text/plain is not accepted here: send the body as application/json or application/*+json');
  // fetch gives a string body a text/plain type; bytes go without one.
  const bare = await fetch(`${s.url}/tokens`, { method: 'POST', headers: { 'svc-api-key': KEYS.private }, body: Buffer.from('{}') });
  t.equal(bare.status, 415);
  const none = (await bare.json()) as { detail: string };
  t.equal(none.detail, 'Content-Type (none) is not accepted here: send the body as application/json or application/*+json');
  const patch = await problem(t, s.call('PATCH', '/tokens/some-id', { body: { metadata: { a: '1' } } }), 415, 'unsupported_media_type');
  t.equal(patch.body.detail, 'Content-Type application/json is not accepted here: send the body as application/merge-patch+json');
});

t.test('invalid_json: the line and column, "empty" for an empty body, never the body', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['a value missing', `{"type":"token","data":}`, 'The request body is not valid JSON: unexpected character at line 1, column 24'],
    ['a trailing comma on line 4', '{\n  "type": "token",\n  "data": "x",\n}', 'The request body is not valid JSON: unexpected character at line 4, column 1'],
    ['columns count characters, not bytes', '{"data": "ééé" "type": "token"}', 'The request body is not valid JSON: unexpected character at line 1, column 16'],
    ['CRLF line breaks', '{\r\n"data": "x",\r\n"type": tru\r\n}', 'The request body is not valid JSON: unexpected character at line 3, column 12'],
    ['a body that ends early', '{"type": "token", "data": "x"', 'The request body is not valid JSON: it ends at line 1, column 30, before the JSON document is complete'],
    ['text after the document', '{"type": "token", "data": "x"} {}', 'The request body is not valid JSON: unexpected character at line 1, column 32'],
    ['an empty body', '', 'The request body is empty: it must be a JSON document'],
    ['whitespace only', ' \r\n\t ', 'The request body is empty: it must be a JSON document'],
  ];
  for (const [what, raw, detail] of cases) {
    const r = await problem(t, s.call('POST', '/tokens', { raw, headers: JSON_CT }), 400, 'invalid_json');
    t.equal(r.body.detail, detail, what);
  }
  // V8's own message would quote this body ("Unexpected token ',', ..."4242…"... is not valid JSON").
  const card = await problem(t, s.call('POST', '/tokenize', { raw: `{"card": "${CARD}",, "x": 1}`, headers: JSON_CT }), 400, 'invalid_json');
  t.equal(card.body.detail, 'The request body is not valid JSON: unexpected character at line 1, column 29');
  t.notOk(card.text.includes(CARD.slice(0, 6)), 'no part of the body in the answer');
});

t.test('invalid_json from the JSON worker (a body over 64 KiB) says the same', async (t) => {
  const long = 'a'.repeat(70_000);
  const r = await problem(t, s.call('POST', '/tokenize', { raw: `{"data": "${long}",\n "x": [1, 2,]}`, headers: JSON_CT }), 400, 'invalid_json');
  t.equal(r.body.detail, 'The request body is not valid JSON: unexpected character at line 2, column 13');
  t.notOk(r.text.includes('aaaa'), 'no part of the body in the answer');
  const search = await problem(t, s.call('POST', '/tokens/search', { raw: `{"query": "${long}"`, headers: JSON_CT }), 400, 'invalid_json');
  t.equal(search.body.detail, `The request body is not valid JSON: it ends at line 1, column ${long.length + 13}, before the JSON document is complete`);
});

t.test('invalid_json on a proxy that reads JSON: the position, wrapped', async (t) => {
  const up = await startUpstream(t);
  const p = await startTestService(t, {
    config: configWithProxies([
      {
        id: 'tok', name: 'tok', key: PROXY_KEY, require_auth: false, destination_url: `${up.url}/base/`,
        request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/card', token: { type: 'token' } }] }],
      },
    ]),
  });
  const r = await p.call('POST', '/proxy/x', { key: null, raw: `{"card": "${CARD}"\n"n": 1}`, headers: { ...JSON_CT, 'svc-proxy-key': PROXY_KEY } });
  t.equal(r.status, 400, r.text);
  t.equal(r.body?.proxy_error?.code, 'invalid_json');
  t.equal(r.body?.proxy_error?.detail, 'The body (declared as JSON) is not valid JSON: unexpected character at line 2, column 1');
  t.notOk(r.text.includes(CARD.slice(0, 6)), 'no part of the body in the answer');
  t.equal(up.received.length, 0, 'nothing forwarded');
});

t.test('route_not_found points to /openapi.json and does not echo the path', async (t) => {
  const r = await problem(t, s.call('GET', `/tokens/${CARD}/nowhere`), 404, 'route_not_found');
  t.equal(r.body.detail, 'No route has this path: GET /openapi.json lists every route of this service');
  t.notOk(r.text.includes(CARD.slice(0, 6)), 'the path is not in the answer');
  const doc = await s.call('GET', '/openapi.json', { key: null });
  t.equal(doc.status, 200, 'and the document is there');
});

t.test('POST /tokens names only the member that is missing', async (t) => {
  const noType = await problem(t, s.call('POST', '/tokens', { body: { data: 'x' } }), 400, 'validation_failed');
  t.equal(noType.body.detail, 'The token definition has no type (one of: token, card, card_number, bank, us_bank_routing_number, us_bank_account_number, social_security_number, employer_id_number)');
  t.same(noType.body.errors, { type: ['required'] });
  const noData = await problem(t, s.call('POST', '/tokens', { body: { type: 'token' } }), 400, 'validation_failed');
  t.equal(noData.body.detail, 'The token definition has no data');
  t.same(noData.body.errors, { data: ['required'] });
  for (const body of [{}, [], 'x']) {
    const neither = await problem(t, s.call('POST', '/tokens', { body }), 400, 'validation_failed');
    t.equal(neither.body.detail, 'The body must be a token definition with type and data');
    t.same(neither.body.errors, { type: ['required'], data: ['required'] });
  }
  // Over 64 KiB the body is parsed in the JSON worker: the same answer.
  const large = await problem(t, s.call('POST', '/tokens', { body: { data: 'x'.repeat(70_000) } }), 400, 'validation_failed');
  t.equal(large.body.detail, 'The token definition has no type (one of: token, card, card_number, bank, us_bank_routing_number, us_bank_account_number, social_security_number, employer_id_number)');
  t.same(large.body.errors, { type: ['required'] });
});
