/**
 * The leak guard scans a body as the destination will decode it (issue 31, finding 9): every JSON
 * media type (`text/json` and `application/*+json` as well as `application/json`) has its string
 * escapes decoded, and a body in UTF-16 (by its charset parameter, by a BOM, or detected as JSON
 * detects it) is decoded before the digits are looked at. In `block` mode a body whose charset the
 * guard cannot decode is `415 unsupported_media_type`, not forwarded unscanned. Each reproduction
 * reached the destination on main before the fix.
 */
import fc from 'fast-check';
import t, { type Test } from 'tap';
import * as guard from '../../src/proxy/leak-guard.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { rawRequest, startUpstream, type Upstream } from '../helpers/upstream.js';
import { assertProxyError, CARD, configWithProxies } from '../helpers/proxy.js';

const SEED = 20_261_125;
const KEY = { block: 'proxy_key_chars_blk_0123456789', log: 'proxy_key_chars_log_0123456789' };

/** `\u00XX` for every character of `s`. */
const jsonEscaped = (s: string) => [...s].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
const utf16le = (s: string) => Buffer.from(s, 'utf16le');
const utf16be = (s: string) => Buffer.from(s, 'utf16le').swap16();
const BOM_LE = Buffer.from([0xff, 0xfe]);
const BOM_BE = Buffer.from([0xfe, 0xff]);

async function start(t: Test): Promise<{ s: TestService; up: Upstream }> {
  const up = await startUpstream(t);
  const s = await startTestService(t, {
    config: configWithProxies([
      { id: 'block', name: 'block', key: KEY.block, require_auth: false, destination_url: `${up.url}/block/`, leak_guard: 'block' },
      { id: 'log', name: 'log', key: KEY.log, require_auth: false, destination_url: `${up.url}/log/`, leak_guard: 'log' },
    ]),
  });
  return { s, up };
}

function send(s: TestService, key: string, contentType: string | undefined, body: Buffer | string) {
  const headers: Record<string, string> = { 'svc-proxy-key': key };
  if (contentType !== undefined) headers['content-type'] = contentType;
  return rawRequest(s.url, { method: 'POST', path: '/proxy/x', headers, body });
}

function leakLines(s: TestService): Array<Record<string, any>> {
  return s.logs().split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter((l) => typeof l.msg === 'string' && l.msg.startsWith('leak guard'));
}

async function eventually(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
}

const card = `{"note":"${CARD}"}`;

t.test('regression: text/json with \\u00XX escapes reached the destination through a blocking guard', async (t) => {
  const { s, up } = await start(t);
  const raw = `{"note":"${jsonEscaped(CARD)}"}`;
  t.equal((JSON.parse(raw) as { note: string }).note, CARD, 'what the destination decodes is the card');
  for (const type of ['text/json', 'text/json; charset=utf-8', 'TEXT/JSON', 'application/vnd.api+json', 'application/problem+json', 'text/x-json', 'application/x-ndjson']) {
    const r = await send(s, KEY.block, type, raw);
    assertProxyError(t, r, 422, 'leak_detected', `${type}:`);
  }
  t.equal(up.received.length, 0, 'nothing forwarded');

  // `log` forwards, and counts the escaped card.
  const r = await send(s, KEY.log, 'text/json', raw);
  t.equal(r.status, 200, 'log forwards');
  const logged = () => leakLines(s).filter((l) => l.proxy === 'log');
  await eventually(() => logged().length > 0);
  t.equal(logged().at(-1)?.findings, 1, 'log: the escaped card counted');
  t.equal(guard.bodyEncoding('text/json'), 'json');
  t.equal(guard.bodyEncoding('text/plain'), 'raw', 'text/plain is not JSON');
});

t.test('regression: UTF-16 bodies (by charset, by BOM, detected as JSON) reached the destination', async (t) => {
  const { s, up } = await start(t);
  const cases: Array<[string, string | undefined, Buffer]> = [
    ['charset=utf-16le', 'application/json; charset=utf-16le', utf16le(card)],
    ['charset="UTF-16LE" (quoted, upper case)', 'application/json; charset="UTF-16LE"', utf16le(card)],
    ['charset=utf-16be', 'application/json; charset=utf-16be', utf16be(card)],
    ['charset=utf-16, little-endian, no BOM', 'application/json; charset=utf-16', utf16le(card)],
    ['charset=utf-16, big-endian, no BOM (RFC 2781)', 'application/json; charset=utf-16', utf16be(card)],
    ['charset=utf-16 with a big-endian BOM', 'application/json; charset=utf-16', Buffer.concat([BOM_BE, utf16be(card)])],
    ['UTF-16LE BOM, no charset', 'application/json', Buffer.concat([BOM_LE, utf16le(card)])],
    ['UTF-16BE BOM, no charset', 'application/json', Buffer.concat([BOM_BE, utf16be(card)])],
    ['UTF-16LE BOM, text/plain', 'text/plain', Buffer.concat([BOM_LE, utf16le(`card ${CARD}`)])],
    ['UTF-16LE BOM, no Content-Type', undefined, Buffer.concat([BOM_LE, utf16le(`card ${CARD}`)])],
    ['UTF-16BE BOM despite charset=utf-8', 'application/json; charset=utf-8', Buffer.concat([BOM_BE, utf16be(card)])],
    ['UTF-16LE JSON without BOM or charset (RFC 4627 detection)', 'application/json', utf16le(card)],
    ['UTF-16BE JSON without BOM or charset (RFC 4627 detection)', 'application/json', utf16be(card)],
    ['UTF-16LE with \\u escapes', 'text/json; charset=utf-16le', utf16le(`{"note":"${jsonEscaped(CARD)}"}`)],
    ['UTF-16LE grouped card in a form', 'application/x-www-form-urlencoded; charset=utf-16le', utf16le('note=4242+4242+4242+4242')],
    ['text/plain; charset=utf-16le', 'text/plain; charset=utf-16le', utf16le(`card ${CARD}`)],
  ];
  for (const [what, type, body] of cases) {
    t.equal(guard.countCardNumbers(body, 'raw'), 0, `${what}: the bytes as they are hold no card`);
    const r = await send(s, KEY.block, type, body);
    assertProxyError(t, r, 422, 'leak_detected', `${what}:`);
  }
  // A legacy multibyte charset (GB18030): a four-byte character ending in the digit 0 right before
  // the card reads as the 17-digit run 0424… in the raw bytes; decoded, the card stands alone.
  const gb = Buffer.concat([Buffer.from('{"note":"'), Buffer.from([0x81, 0x30, 0x81, 0x30]), Buffer.from(`${CARD}"}`)]);
  t.equal(new TextDecoder('gb18030').decode(gb), `{"note":"\u0080${CARD}"}`);
  assertProxyError(t, await send(s, KEY.block, 'application/json; charset=gb18030', gb), 422, 'leak_detected', 'gb18030:');
  t.equal(up.received.length, 0, 'nothing forwarded');

  // Clean bodies in those encodings pass, byte for byte.
  const clean = '{"amount":100,"currency":"EUR","note":"ok – fine"}';
  const ok: Array<[string, Buffer]> = [
    ['application/json; charset=utf-16le', utf16le(clean)],
    ['application/json; charset=utf-16', Buffer.concat([BOM_BE, utf16be(clean)])],
    ['application/json', Buffer.concat([BOM_LE, utf16le(clean)])],
    ['application/json; charset=iso-8859-1', Buffer.from('{"note":"caf\xe9"}', 'latin1')],
    ['application/json; charset=utf-8', Buffer.from(clean)],
  ];
  for (const [type, body] of ok) {
    const r = await send(s, KEY.block, type, body);
    t.equal(r.status, 200, `${type}: clean body forwarded: ${r.text.slice(0, 200)}`);
    t.same(up.received.at(-1)?.body, body, `${type}: byte for byte`);
  }
});

t.test('block refuses (415) a body in a charset the guard cannot decode; log forwards it', async (t) => {
  const { s, up } = await start(t);
  const refused: Array<[string, string, Buffer]> = [
    // UTF-7 writes `4` as `+ADQ-`: no digit in the bytes, the card in what the destination decodes.
    ['utf-7', 'application/json; charset=utf-7', Buffer.from(`{"note":"${[...CARD].map((c) => `+AD${c === '4' ? 'Q' : 'I'}-`).join('')}"}`)],
    ['utf-32', 'application/json; charset=utf-32', Buffer.from('{"a":1}')],
    ['an unknown label', 'text/plain; charset=x-no-such-charset', Buffer.from('hello')],
    ['a label that decodes to nothing (replacement)', 'text/plain; charset=iso-2022-kr', Buffer.from('hello')],
    ['two different charset parameters', 'application/json; charset=utf-8; charset=utf-16le', Buffer.from('{"a":1}')],
    ['UTF-32LE BOM', 'application/json', Buffer.from([0xff, 0xfe, 0, 0, 0x7b, 0, 0, 0, 0x7d, 0, 0, 0])],
    ['UTF-32BE JSON without BOM', 'application/json', Buffer.from([0, 0, 0, 0x7b, 0, 0, 0, 0x7d])],
    ['malformed UTF-16 (odd length)', 'application/json; charset=utf-16le', Buffer.concat([utf16le('{"a":1}'), Buffer.from([0x20])])],
    ['malformed UTF-16 (lone surrogate)', 'application/json; charset=utf-16le', Buffer.concat([utf16le('{"a":"'), Buffer.from([0x00, 0xd8]), utf16le('"}')])],
  ];
  for (const [what, type, body] of refused) {
    const r = await send(s, KEY.block, type, body);
    assertProxyError(t, r, 415, 'unsupported_media_type', `${what}:`);
    t.match(r.json?.proxy_error?.detail, /charset/i, `${what}: the detail says why`);
  }
  t.equal(up.received.length, 0, 'nothing forwarded by block');
  for (const [what, type, body] of refused) {
    const r = await send(s, KEY.log, type, body);
    t.equal(r.status, 200, `log forwards ${what}`);
  }
  t.equal(up.received.length, refused.length, 'log forwarded every one');
  const warned = () => leakLines(s).filter((l) => l.undecodable === true && l.proxy === 'log');
  await eventually(() => warned().length >= refused.length);
  t.equal(warned().length, refused.length, 'log: one warning per undecodable body');
  t.equal(leakLines(s).filter((l) => l.undecodable === true && l.proxy === 'block').length, refused.length, 'block: one warning per refusal');
  t.notOk(s.logs().includes('x-no-such-charset'), 'the label is not echoed into the log');
});

t.test('LeakScanner: the same findings and verdict however a UTF-16 body is cut into chunks', async (t) => {
  const piece = fc.constantFrom(CARD, '4242 4242 4242 4242', jsonEscaped(CARD), 'x', ' ', '"', '\\', 'é', '€', '𝄞', '12', '{', '}');
  const types = ['application/json; charset=utf-16le', 'application/json; charset=utf-16be', 'application/json; charset=utf-16', 'application/json', 'text/plain; charset=gb18030'];
  fc.assert(
    fc.property(fc.array(piece, { maxLength: 10 }), fc.constantFrom(...types), fc.constantFrom('le', 'be', 'bom-le', 'bom-be'), fc.array(fc.nat(), { maxLength: 5 }), (parts, type, form, cuts) => {
      const text = parts.join('');
      const bytes = form === 'le' ? utf16le(text) : form === 'be' ? utf16be(text) : form === 'bom-le' ? Buffer.concat([BOM_LE, utf16le(text)]) : Buffer.concat([BOM_BE, utf16be(text)]);
      const whole = new guard.LeakScanner(guard.scanType(type));
      whole.push(bytes);
      const findings = whole.end();
      const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
      const scanner = new guard.LeakScanner(guard.scanType(type));
      let from = 0;
      for (const c of at) {
        scanner.push(bytes.subarray(from, c));
        from = c;
      }
      scanner.push(bytes.subarray(from));
      return scanner.end() === findings && scanner.undecodable === whole.undecodable;
    }),
    { seed: SEED, numRuns: 5_000 },
  );
  t.pass('5,000 generated UTF-16 bodies, each cut at up to 5 places');
  // And a UTF-16 card is found whichever way the body is declared.
  const s = new guard.LeakScanner(guard.scanType('application/json; charset=utf-16le'));
  s.push(utf16le(card).subarray(0, 7));
  s.push(utf16le(card).subarray(7));
  t.equal(s.end(), 1);
  t.equal(s.undecodable, false);
});

/** A multipart/form-data body of `parts` (headers, body) with boundary `b`. */
function multipart(b: string, parts: Array<[Record<string, string>, Buffer | string]>): Buffer {
  const chunks: Buffer[] = [];
  for (const [headers, body] of parts) {
    chunks.push(Buffer.from(`--${b}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`), Buffer.from(body), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${b}--\r\n`));
  return Buffer.concat(chunks);
}

t.test('multipart parts are read in their own charset and transfer encoding (block)', async (t) => {
  const { s, up } = await start(t);
  const B = 'xYzBoundary42';
  const type = `multipart/form-data; boundary="${B}"`;
  const disp = (n: string) => ({ 'Content-Disposition': `form-data; name="${n}"` });
  const leaks: Array<[string, Buffer]> = [
    ['a UTF-16LE part', multipart(B, [[disp('a'), 'x'], [{ ...disp('note'), 'Content-Type': 'text/plain; charset=utf-16le' }, utf16le(`card ${CARD}`)]])],
    ['a UTF-16 part with a BOM', multipart(B, [[disp('note'), Buffer.concat([BOM_BE, utf16be(CARD)])]])],
    ['a JSON part with \\u escapes', multipart(B, [[{ ...disp('j'), 'Content-Type': 'text/json' }, `{"n":"${jsonEscaped(CARD)}"}`]])],
    ['a quoted-printable part', multipart(B, [[{ ...disp('q'), 'Content-Transfer-Encoding': 'quoted-printable' }, [...CARD].map((c) => `=${c.charCodeAt(0).toString(16).toUpperCase()}`).join('=\r\n')]])],
    ['a base64 part', multipart(B, [[{ ...disp('b'), 'Content-Transfer-Encoding': 'BASE64' }, Buffer.from(`card ${CARD}`).toString('base64')]])],
    ['a part without headers, nested in a base64 part', multipart(B, [[{ ...disp('m'), 'Content-Type': 'multipart/mixed; boundary=in', 'Content-Transfer-Encoding': 'base64' }, Buffer.from(`--in\r\n\r\n${CARD}\r\n--in--`).toString('base64')]])],
    ['a nested multipart part', multipart(B, [[{ ...disp('m'), 'Content-Type': 'multipart/mixed; boundary=inner' }, multipart('inner', [[{ 'Content-Transfer-Encoding': 'base64' }, Buffer.from(CARD).toString('base64')]])]])],
  ];
  for (const [what, body] of leaks) {
    t.equal(guard.countCardNumbers(body, 'raw'), 0, `${what}: the bytes as they are hold no card`);
    assertProxyError(t, await send(s, KEY.block, type, body), 422, 'leak_detected', `${what}:`);
  }
  // A transfer encoding or charset the guard cannot decode, in a part: refused.
  for (const [what, body] of [
    ['x-uuencode', multipart(B, [[{ ...disp('u'), 'Content-Transfer-Encoding': 'x-uuencode' }, 'begin 644 x']])],
    ['a utf-7 part', multipart(B, [[{ ...disp('u'), 'Content-Type': 'text/plain; charset=utf-7' }, '+ADQ-']])],
  ] as Array<[string, Buffer]>) {
    assertProxyError(t, await send(s, KEY.block, type, body), 415, 'unsupported_media_type', `${what}:`);
  }
  t.equal(up.received.length, 0, 'nothing forwarded');
  // A plain card in a plain part is still found, once; clean parts of every kind pass.
  assertProxyError(t, await send(s, KEY.block, type, multipart(B, [[disp('n'), `4242 4242 4242 4242`]])), 422, 'leak_detected', 'plain part:');
  const clean = multipart(B, [
    [disp('a'), 'hello'],
    [{ ...disp('f'), 'Content-Type': 'application/octet-stream', 'Content-Transfer-Encoding': 'base64' }, Buffer.from('no digits here').toString('base64')],
    [{ ...disp('u'), 'Content-Type': 'text/plain; charset=utf-16le' }, utf16le('ok – 12 items')],
    [{ ...disp('q'), 'Content-Transfer-Encoding': 'quoted-printable' }, 'caf=C3=A9 =\r\nsoft'],
  ]);
  const r = await send(s, KEY.block, type, clean);
  t.equal(r.status, 200, `clean multipart forwarded: ${r.text.slice(0, 200)}`);
  t.same(up.received.at(-1)?.body, clean, 'byte for byte');
});
