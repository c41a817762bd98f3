/**
 * Limits are checked before the body is read, and a 429 never reaches the store:
 * - over the limit, a POST whose body is larger than `server.body_limit_bytes` answers 429 (not
 *   413), and so does one whose body is not JSON at all (not 400/415): the body was never read;
 * - requests refused with 429 create nothing: a listing with another key afterwards shows only the
 *   tokens of the admitted requests.
 */
import t from 'tap';
import { startTestService } from '../helpers/service.js';
import { client, expect429, expectAllowed, limitedConfig, oneToken, tenant } from './http-helpers.js';

const BODY_LIMIT = 1024;
// App 0 writes (creating tokens: 1 point a minute); app 1 is a fresh key that lists afterwards.
const writer = tenant({ custom: { creating_tokens: { points: 1, duration_seconds: 60 } }, apps: [{ kind: 'private' }, { kind: 'private' }] });
const control = tenant({ apps: [{ kind: 'private' }] });

const s = await startTestService(t, { config: limitedConfig([writer, control], { server: { body_limit_bytes: BODY_LIMIT } }) });

const big = (bytes: number) => JSON.stringify({ a: 'x'.repeat(bytes) });

t.test('control: without a limit in the way, the big body is refused by the body limit (413)', async (t) => {
  const c = client(t, s.url);
  const r = await c.send('POST', '/tokenize', { key: control.keys[0][0], raw: big(8 * 1024) });
  t.equal(r.status, 413);
  t.equal(r.body?.code, 'body_too_large');
});

t.test('a 429 is answered before the body is read, and never reaches the store', async (t) => {
  const c = client(t, s.url);
  const key = writer.keys[0][0];
  const admitted = await c.send('POST', '/tokenize', { key, body: { kept: 'the-one-admitted-value' } });
  expectAllowed(t, admitted, 200, 1, 0, 'the one admitted request:');
  const keptId = (admitted.body as { kept: string }).kept;

  // Bodies the body stage would refuse (413 / 415 / 400) get the 429 instead.
  expect429(t, await c.send('POST', '/tokenize', { key, raw: big(8 * 1024) }), 1, 'POST /tokenize, 8 KB body over the 1 KB limit:');
  expect429(t, await c.send('POST', '/tokens', { key, raw: big(8 * 1024) }), 1, 'POST /tokens, 8 KB body:');
  const huge = await c.send('POST', '/tokenize', { key, raw: big(256 * 1024) });
  expect429(t, huge, 1, 'POST /tokenize, 256 KB body:');
  t.equal(huge.headers.connection, 'close', 'a large unread body closes the connection instead of being drained');
  expect429(t, await c.send('POST', '/tokenize', { key, raw: 'not json at all', headers: { 'content-type': 'text/plain' } }), 1, 'text/plain body:');

  // Valid bodies over the limit: refused, nothing written.
  const c2 = client(t, s.url);
  for (let i = 0; i < 5; i++) {
    expect429(t, await c2.send('POST', '/tokenize', { key, body: { refused: `refused-value-${i}` } }), 1, `valid tokenize ${i}:`);
    expect429(t, await c2.send('POST', '/tokens', { key, body: oneToken(`refused-token-${i}`) }), 1, `valid create ${i}:`);
  }

  const listed = await c2.send('GET', '/tokens?size=100', { key: writer.keys[1][0] });
  t.equal(listed.status, 200, 'a fresh key lists');
  const ids = (listed.body as { data: Array<{ id: string }> }).data.map((d) => d.id);
  t.same(ids, [keptId], 'only the admitted request created a token');
});
