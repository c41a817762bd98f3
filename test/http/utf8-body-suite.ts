/**
 * JSON bodies must be UTF-8 (RFC 8259 §8.1), on every store: a body with a byte that is not part
 * of a UTF-8 character is 400 invalid_json naming its offset (never the bytes), a `charset` other
 * than UTF-8 is 415, and in both cases nothing is stored. Before the check, `caf\xE9` was answered
 * 200 and read back as `caf\uFFFD`: the value stored was not the one sent. Run by
 * utf8-body.test.ts (embedded store) and its Redis and PostgreSQL siblings.
 */
import { checkResponses, type OpenApiChecker } from '../helpers/openapi.js';
import type { StartTestOptions, TestService } from '../helpers/service.js';
import { KEYS, startTestService } from '../helpers/service.js';
import { tokenCount } from '../helpers/tokens.js';

/** The OpenAPI checker of each service started by startChecked, by its URL. */
const checkers = new Map<string, OpenApiChecker>();

/** startTestService, with every answer (s.call's and send's) checked against GET /openapi.json. */
export async function startChecked(t: { teardown(fn: () => unknown): void }, opts: StartTestOptions = {}): Promise<TestService> {
  const s = await startTestService(t, opts);
  checkers.set(s.url, await checkResponses(s));
  return s;
}

/** `{"v":"caf` + 0xE9 + `"}`: a Latin-1 é, at offset 9. */
export const LATIN1 = Buffer.concat([Buffer.from('{"v":"caf'), Buffer.from([0xe9]), Buffer.from('"}')]);

/** `prefix` + `bytes` + `suffix` as one body; the offset of `bytes` is prefix's length in bytes. */
export function withBytes(prefix: string, bytes: number[], suffix: string): { body: Buffer; offset: number } {
  const head = Buffer.from(prefix, 'utf8');
  return { body: Buffer.concat([head, Buffer.from(bytes), Buffer.from(suffix, 'utf8')]), offset: head.length };
}

export interface Answer {
  status: number;
  body: any;
  text: string;
}

/** A request whose body is sent as these bytes (helpers/service.ts call() sends strings, which are always UTF-8). */
export async function send(
  s: Pick<TestService, 'url'>,
  method: string,
  path: string,
  body: Buffer,
  /** null: the header is not sent. */
  headers: Record<string, string | null> = {},
): Promise<Answer> {
  const all: Record<string, string | null> = { 'svc-api-key': KEYS.private, 'content-type': 'application/json', ...headers };
  const sent = Object.fromEntries(Object.entries(all).filter((e): e is [string, string] => e[1] !== null));
  const res = await fetch(s.url + path, { method, headers: sent, body: new Uint8Array(body) });
  const text = await res.text();
  checkers.get(s.url)?.assert(method, path, { status: res.status, headers: res.headers, text });
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, body: parsed, text };
}

interface Tap {
  test(name: string, fn: (t: any) => Promise<void>): unknown;
}

interface Assert {
  equal(...args: any[]): unknown;
  match(...args: any[]): unknown;
  notMatch(...args: any[]): unknown;
}

/** A 400 invalid_json whose detail names `offset` and quotes nothing of the body. */
export function assertInvalidUtf8(t: Assert, r: Answer, offset: number, msg: string, problem: any = r.body): void {
  t.equal(r.status, 400, `${msg}: status 400 (${r.text.slice(0, 300)})`);
  t.match(problem, { code: 'invalid_json', type: 'urn:tokenproxy:problem:invalid_json', status: 400 }, `${msg}: invalid_json`);
  t.match(problem?.detail, new RegExp(`not UTF-8.*\\boffset ${offset}\\b`), `${msg}: the detail names offset ${offset}`);
  t.notMatch(r.text, /caf|\ufffd|\\ufffd/i, `${msg}: nothing of the body is echoed`);
}

/** The cases every store runs: /tokenize, POST /tokens, PATCH /tokens/{id}, a charset; nothing stored. */
export function utf8Suite(t: Tap, store: (t: any) => Promise<StartTestOptions>): void {
  t.test('invalid UTF-8 is refused on the token routes and nothing is stored', async (t) => {
    const s = await startChecked(t, await store(t));

    assertInvalidUtf8(t, await send(s, 'POST', '/tokenize', LATIN1), 9, 'POST /tokenize');
    const create = withBytes('{"type":"token","data":"caf', [0xe9], '"}');
    assertInvalidUtf8(t, await send(s, 'POST', '/tokens', create.body), create.offset, 'POST /tokens');
    t.equal(await tokenCount(s), 0, 'no token was created');

    // PATCH: the token keeps its value.
    const made = await s.call('POST', '/tokens', { body: { type: 'token', data: 'café' } });
    t.equal(made.status, 201);
    const patch = withBytes('{"data":"caf', [0xe9], '"}');
    assertInvalidUtf8(t, await send(s, 'PATCH', `/tokens/${made.body.id}`, patch.body, { 'content-type': 'application/merge-patch+json' }), patch.offset, 'PATCH');
    const read = await s.call('GET', `/tokens/${made.body.id}`);
    t.equal(read.body.data, 'café', 'the token keeps the value it had');
    t.equal(await tokenCount(s), 1, 'only the valid token exists');

    // A charset other than UTF-8 is 415, though these bytes would parse.
    const latin = await send(s, 'POST', '/tokenize', Buffer.from('{"v":"cafe"}'), { 'content-type': 'application/json; charset=iso-8859-1' });
    t.equal(latin.status, 415, `charset=iso-8859-1: 415 (${latin.text})`);
    t.match(latin.body, { code: 'unsupported_media_type', detail: /UTF-8/ });
    t.equal(await tokenCount(s), 1, 'nothing stored after the 415');

    // The same bytes, valid UTF-8, are stored as sent.
    const ok = await send(s, 'POST', '/tokens', Buffer.from('{"type":"token","data":"caf\u00e9"}', 'utf8'), { 'content-type': 'application/json; charset=UTF-8' });
    t.equal(ok.status, 201, `charset=UTF-8: 201 (${ok.text})`);
    t.equal((await s.call('GET', `/tokens/${ok.body.id}`)).body.data, 'café', 'read back as sent');
  });
}
