/**
 * JSON bodies must be UTF-8 (RFC 8259 §8.1), on the embedded store: the suite (utf8-body-suite.ts),
 * then every other way a body is read: the ill-formed sequences (overlong forms, encoded
 * surrogates, code points past U+10FFFF, truncated sequences, stray continuation bytes), a body
 * over 64 KiB (parsed in the JSON worker), /detokenize, a reactor (small and large), the charset
 * parameter's forms, and the inbound proxy's tokenize transform (JSON and form bodies).
 */
import t from 'tap';
import { baseConfig, KEYS } from '../helpers/service.js';
import { tokenCount } from '../helpers/tokens.js';
import { startUpstream } from '../helpers/upstream.js';
import { assertProxyError, configWithProxies, PROXY_KEY } from '../helpers/proxy.js';
import { assertInvalidUtf8, LATIN1, send, startChecked, utf8Suite, withBytes } from './utf8-body-suite.js';

utf8Suite(t, async () => ({}));

t.test('every ill-formed UTF-8 sequence is refused at its first byte; well-formed edges pass', async (t) => {
  const s = await startChecked(t);
  const bad: Array<[string, number[]]> = [
    ['overlong "/" (C0 AF)', [0xc0, 0xaf]],
    ['overlong NUL (C1 80)', [0xc1, 0x80]],
    ['overlong 3-byte (E0 80 AF)', [0xe0, 0x80, 0xaf]],
    ['overlong 4-byte (F0 80 80 AF)', [0xf0, 0x80, 0x80, 0xaf]],
    ['a high surrogate encoded (ED A0 80)', [0xed, 0xa0, 0x80]],
    ['a low surrogate encoded (ED BF BF)', [0xed, 0xbf, 0xbf]],
    ['a surrogate pair encoded as two (ED A0 BD ED B8 80)', [0xed, 0xa0, 0xbd, 0xed, 0xb8, 0x80]],
    ['past U+10FFFF (F4 90 80 80)', [0xf4, 0x90, 0x80, 0x80]],
    ['F5, never in UTF-8', [0xf5, 0x80, 0x80, 0x80]],
    ['FF', [0xff]],
    ['a stray continuation byte (80)', [0x80]],
    ['a truncated 3-byte sequence (E2 82)', [0xe2, 0x82]],
    ['a truncated 4-byte sequence (F0 9F 98)', [0xf0, 0x9f, 0x98]],
  ];
  for (const [name, bytes] of bad) {
    // A multi-byte character before: the offset counts bytes, not characters.
    const { body, offset } = withBytes('{"v":"é ', bytes, '"}');
    assertInvalidUtf8(t, await send(s, 'POST', '/tokenize', body), offset, name);
  }
  // At the very end of the body (no closing quote after it).
  const tail = withBytes('{"v":"x', [0xe2, 0x82], '');
  assertInvalidUtf8(t, await send(s, 'POST', '/tokenize', tail.body), tail.offset, 'a truncated sequence at the end of the body');
  t.equal(await tokenCount(s), 0, 'nothing was stored');

  // The edges of the well-formed ranges: U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFD, U+10000, U+10FFFF.
  const good = '\u0080\u07ff\u0800\ud7ff\ue000\ufffd\u{10000}\u{10ffff}';
  const ok = await send(s, 'POST', '/tokens', Buffer.from(JSON.stringify({ type: 'token', data: good }), 'utf8'));
  t.equal(ok.status, 201, ok.text);
  t.equal((await s.call('GET', `/tokens/${ok.body.id}`)).body.data, good, 'stored as sent');
});

t.test('a body over 64 KiB (parsed in the JSON worker) is refused the same way', async (t) => {
  const s = await startChecked(t);
  const pad = 'a'.repeat(100 * 1024);
  const large = withBytes(`{"pad":"${pad}","v":"caf`, [0xe9], '"}');
  t.ok(large.body.length > 64 * 1024);
  assertInvalidUtf8(t, await send(s, 'POST', '/tokenize', large.body), large.offset, 'a large /tokenize');
  const create = withBytes(`{"type":"token","data":{"pad":"${pad}","v":"caf`, [0xed, 0xa0, 0x80], '"}}');
  assertInvalidUtf8(t, await send(s, 'POST', '/tokens', create.body), create.offset, 'a large POST /tokens');
  t.equal(await tokenCount(s), 0, 'nothing was stored');

  const made = await s.call('POST', '/tokens', { body: { type: 'token', data: 'café' } });
  const patch = withBytes(`{"metadata":{"pad":"${pad}","v":"caf`, [0xc0, 0xaf], '"}}');
  assertInvalidUtf8(t, await send(s, 'PATCH', `/tokens/${made.body.id}`, patch.body, { 'content-type': 'application/merge-patch+json' }), patch.offset, 'a large PATCH');
  const read = await s.call('GET', `/tokens/${made.body.id}`);
  t.equal(read.body.data, 'café');
  t.same(read.body.metadata ?? {}, {}, 'the patch changed nothing');
  const search = withBytes(`{"query":"${pad}`, [0xe9], '"}');
  assertInvalidUtf8(t, await send(s, 'POST', '/tokens/search', search.body), search.offset, 'a large POST /tokens/search');
  t.equal(await tokenCount(s), 1);
});

t.test('/detokenize and a reactor refuse invalid UTF-8; the charset forms', async (t) => {
  const cfg = baseConfig() as any;
  cfg.tenants[0].reactors = [{ id: 'echo', name: 'echo', code: 'module.exports = async function (req) { return { raw: req.args }; };' }];
  const s = await startChecked(t, { config: cfg });
  assertInvalidUtf8(t, await send(s, 'POST', '/detokenize', LATIN1), 9, 'POST /detokenize');
  const small = withBytes('{"args":{"v":"caf', [0xe9], '"}}');
  assertInvalidUtf8(t, await send(s, 'POST', '/reactors/echo/react', small.body), small.offset, 'a reactor');
  const large = withBytes(`{"args":{"pad":"${'a'.repeat(70 * 1024)}","v":"caf`, [0xe9], '"}}');
  assertInvalidUtf8(t, await send(s, 'POST', '/reactors/echo/react', large.body), large.offset, 'a reactor, large body');
  const echoed = await send(s, 'POST', '/reactors/echo/react', Buffer.from('{"args":{"v":"café"}}', 'utf8'));
  t.equal(echoed.status, 200, echoed.text);
  t.same(echoed.body.raw, { v: 'café' }, 'valid UTF-8 reaches the reactor as sent');

  // charset: utf-8 in any case, quoted or not, and its registered alias csUTF8; anything else is 415.
  const body = Buffer.from('{"v":"x"}');
  for (const ct of ['application/json; charset=utf-8', 'application/json;charset=UTF-8', 'application/json; charset="Utf-8"', 'application/json; CHARSET=csUTF8', 'application/json; foo=bar']) {
    const r = await send(s, 'POST', '/tokenize', body, { 'content-type': ct });
    t.equal(r.status, 200, `${ct}: 200 (${r.text})`);
  }
  const before = await tokenCount(s);
  for (const ct of ['application/json; charset=iso-8859-1', 'application/json; charset=utf8', 'application/json; charset=utf-16', 'application/json; charset=""', 'application/json; charset=us-ascii', 'application/json; charset=utf-8; charset=latin1']) {
    const r = await send(s, 'POST', '/tokenize', body, { 'content-type': ct });
    t.equal(r.status, 415, `${ct}: 415 (${r.text})`);
    t.match(r.body, { code: 'unsupported_media_type', detail: /charset=utf-8/ }, `${ct}: says what to send`);
  }
  const patch = await send(s, 'PATCH', '/tokens/00000000-0000-4000-8000-000000000000', body, { 'content-type': 'application/merge-patch+json; charset=windows-1252' });
  t.equal(patch.status, 415, 'PATCH with charset=windows-1252: 415');
  t.equal(await tokenCount(s), before, 'nothing stored after the 415s');
});

t.test("the inbound proxy's tokenize transform refuses invalid UTF-8 and other charsets; nothing stored or forwarded", async (t) => {
  const up = await startUpstream(t);
  const cfg = configWithProxies([
    {
      id: 'tok', name: 'tok', key: PROXY_KEY, require_auth: false, destination_url: up.url,
      request_transforms: [{ type: 'tokenize', fields: [{ pointer: '/v', token: { type: 'token' } }] }],
    },
  ]);
  const s = await startChecked(t, { config: cfg });
  const proxy = (body: Buffer, type: string) => send(s, 'POST', '/proxy/x', body, { 'svc-api-key': null, 'svc-proxy-key': PROXY_KEY, 'content-type': type });

  const json = await proxy(LATIN1, 'application/json');
  assertProxyError(t, json, 400, 'invalid_json', 'JSON:');
  assertInvalidUtf8(t, json, 9, 'proxy JSON', json.body?.proxy_error);
  const large = withBytes(`{"pad":"${'a'.repeat(70 * 1024)}","v":"caf`, [0xe9], '"}');
  const largeAnswer = await proxy(large.body, 'application/json');
  assertInvalidUtf8(t, largeAnswer, large.offset, 'proxy, large JSON', largeAnswer.body?.proxy_error);

  const latin = await proxy(Buffer.from('{"v":"cafe"}'), 'application/json; charset=iso-8859-1');
  assertProxyError(t, latin, 415, 'unsupported_media_type', 'JSON, charset=iso-8859-1:');

  // A form: the value is percent-decoded, then must be UTF-8 (%E9 is Latin-1's é).
  const form = await proxy(Buffer.from('a=1&v=caf%E9&b=2'), 'application/x-www-form-urlencoded');
  assertProxyError(t, form, 400, 'validation_failed', 'form, %E9:');
  t.match(form.body?.proxy_error, { errors: { v: [/UTF-8/] } }, 'the field is named');
  t.notMatch(form.text, /caf/, 'the value is not echoed');
  const rawForm = await proxy(withBytes('a=1&v=caf', [0xe9], '&b=2').body, 'application/x-www-form-urlencoded');
  assertProxyError(t, rawForm, 400, 'validation_failed', 'form, a raw E9 byte:');
  const formLatin = await proxy(Buffer.from('v=cafe'), 'application/x-www-form-urlencoded; charset=iso-8859-1');
  assertProxyError(t, formLatin, 415, 'unsupported_media_type', 'form, charset=iso-8859-1:');

  t.equal(up.received.length, 0, 'nothing reached the destination');
  t.equal(await tokenCount(s), 0, 'no token was created');

  // Valid bodies still go through, and the untouched bytes of a form are forwarded as they were.
  const ok = await proxy(Buffer.from('{"v":"café"}', 'utf8'), 'application/json; charset=utf-8');
  t.equal(ok.status, 200, ok.text);
  const okForm = await proxy(Buffer.from('v=caf%C3%A9&other=%E9'), 'application/x-www-form-urlencoded');
  t.equal(okForm.status, 200, `a form whose other field is not UTF-8 is forwarded: ${okForm.text}`);
  t.match(up.received[1]?.body.toString('latin1'), /&other=%E9$/, 'the other field byte for byte');
  t.equal(await tokenCount(s), 2);
  const ids = JSON.parse(up.received[0]!.body.toString('utf8')) as { v: string };
  t.equal((await s.call('GET', `/tokens/${ids.v}`, { key: KEYS.private })).body.data, 'café', 'stored as sent');
});

t.test('the outbound proxy reads bodies as UTF-8 only; a JSON answer a response transform would rewrite must be UTF-8', async (t) => {
  const up = await startUpstream(t);
  let answer: Buffer = Buffer.from('{"ok":true}');
  up.respond((_r, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': answer.length });
    res.end(answer);
  });
  const cfg = configWithProxies([
    {
      id: 'resp', name: 'resp', key: PROXY_KEY, require_auth: false, destination_url: up.url,
      response_transforms: [{ type: 'append_json', location: '/added', value: 'yes' }],
    },
  ]);
  const app = cfg.tenants[0].applications[0];
  app.permissions = [...app.permissions, 'token:use'];
  app.rules[0].permissions = [...app.rules[0].permissions, 'token:use'];
  cfg.tenants[0].outbound = { allowed_destinations: [up.url] };
  const s = await startChecked(t, { config: cfg });
  const made = await s.call('POST', '/tokens', { body: { type: 'token', data: 'order-77' } });
  t.equal(made.status, 201, made.text);
  const expr = `{{ ${made.body.id} }}`;
  const outbound = (body: Buffer, type: string) => send(s, 'POST', '/proxy/pay', body, { 'svc-proxy-url': up.url, 'content-type': type });

  const json = withBytes(`{"ref":"${expr}","v":"caf`, [0xe9], '"}');
  const j = await outbound(json.body, 'application/json');
  assertProxyError(t, j, 400, 'invalid_json', 'outbound JSON:');
  assertInvalidUtf8(t, j, json.offset, 'outbound JSON', j.body?.proxy_error);
  assertProxyError(t, await outbound(Buffer.from(`{"ref":"${expr}"}`), 'application/json; charset=iso-8859-1'), 415, 'unsupported_media_type', 'outbound JSON, charset=iso-8859-1:');
  // A form is split and joined whole: a raw byte that is not UTF-8 would come back as U+FFFD.
  const form = withBytes(`ref=${encodeURIComponent(expr)}&v=caf`, [0xe9], '');
  const f = await outbound(form.body, 'application/x-www-form-urlencoded');
  assertProxyError(t, f, 400, 'validation_failed', 'outbound form:');
  t.match(f.body?.proxy_error?.detail, new RegExp(`not UTF-8.*offset ${form.offset}\\b`), 'the offset is named');
  assertProxyError(t, await outbound(Buffer.from(`ref=${encodeURIComponent(expr)}`), 'application/x-www-form-urlencoded; charset=iso-8859-1'), 415, 'unsupported_media_type', 'outbound form, charset=iso-8859-1:');
  t.equal(up.received.length, 0, 'nothing was sent');
  const ok = await outbound(Buffer.from(`ref=${encodeURIComponent(expr)}&v=caf%C3%A9`), 'application/x-www-form-urlencoded; charset=UTF-8');
  t.equal(ok.status, 200, ok.text);
  t.equal(up.received[0]?.body.toString('latin1'), 'ref=order-77&v=caf%C3%A9', 'a UTF-8 form is detokenized');

  // The destination answers JSON in Latin-1: append_json would have put U+FFFD in its place.
  answer = withBytes('{"v":"caf', [0xe9], '"}').body;
  const r = await send(s, 'POST', '/proxy/x', Buffer.from('{}'), { 'svc-api-key': null, 'svc-proxy-key': PROXY_KEY });
  assertProxyError(t, r, 502, 'destination_response_untransformable', 'a Latin-1 answer:');
  t.match(r.body?.proxy_error?.detail, /not UTF-8.*offset 9\b/);
  t.notMatch(r.text, /caf/, 'nothing of the answer is echoed');
  answer = Buffer.from('{"v":"café"}', 'utf8');
  const good = await send(s, 'POST', '/proxy/x', Buffer.from('{}'), { 'svc-api-key': null, 'svc-proxy-key': PROXY_KEY });
  t.equal(good.status, 200, good.text);
  t.same(good.body, { v: 'café', added: 'yes' });
});
