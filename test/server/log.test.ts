/**
 * src/log.ts: what the logger censors before a line is serialized: fields named data, body, args,
 * key, apiKey, proxyKey (at any of the first levels), sensitive headers inside any `headers`
 * object, and card numbers in every string; the caller's objects are never modified.
 */
import t from 'tap';
import { createLogger, REDACTED, REDACTED_FIELDS, REDACTED_HEADERS } from '../../src/log.js';
import { grouped, randomCard, randomMarker } from '../helpers/secrets.js';

function capture(): { log: ReturnType<typeof createLogger>; lines: () => Array<Record<string, unknown>>; raw: () => string } {
  const chunks: string[] = [];
  const log = createLogger('debug', { write: (s: string) => void chunks.push(s) } as never);
  return { log, lines: () => chunks.join('').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>), raw: () => chunks.join('') };
}

t.test('censored fields at the top level and nested, whatever their value', async (t) => {
  const { log, lines, raw } = capture();
  const secret = randomMarker('log');
  for (const field of REDACTED_FIELDS) {
    log.info({ [field]: secret, nested: { [field]: { deep: secret } }, deeper: { a: { [field]: [secret] } } }, 'fields');
  }
  for (const line of lines()) {
    const field = [...REDACTED_FIELDS].find((f) => f in line)!;
    t.equal(line[field], REDACTED, `${field} at the top level`);
    t.equal((line.nested as Record<string, unknown>)[field], REDACTED, `${field} one level down`);
    t.equal(((line.deeper as Record<string, Record<string, unknown>>).a)[field], REDACTED, `${field} two levels down`);
  }
  t.equal(lines().length, REDACTED_FIELDS.size);
  t.notOk(raw().includes(secret), 'the secret is nowhere in the output');
});

t.test('sensitive headers, in any case, inside any headers object; others kept', async (t) => {
  const { log, lines, raw } = capture();
  const secret = randomMarker('log');
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  for (const h of REDACTED_HEADERS) headers[h.toUpperCase()] = secret;
  log.warn({ headers, upstream: { headers } }, 'headers');
  const [line] = lines();
  for (const where of [line!.headers, (line!.upstream as Record<string, unknown>).headers] as Array<Record<string, unknown>>) {
    for (const h of REDACTED_HEADERS) t.equal(where[h.toUpperCase()], REDACTED, h);
    t.equal(where['content-type'], 'application/json', 'a harmless header is kept');
  }
  t.notOk(raw().includes(secret));
  t.equal(headers['SVC-API-KEY'], secret, "the caller's object is not modified");
});

t.test('card numbers in messages, format arguments and string fields; other fields untouched', async (t) => {
  const { log, raw, lines } = capture();
  const card = randomCard();
  const spaced = grouped(card);
  log.error({ note: `paid with ${card}`, status: 502, ok: false, list: [`x ${spaced}`] }, `message ${card} and %s`, spaced);
  t.notOk(raw().includes(card), 'the contiguous card is gone');
  t.notOk(raw().includes(spaced), 'the grouped card is gone');
  const [line] = lines();
  t.equal(line!.status, 502, 'numbers kept');
  t.equal(line!.ok, false, 'booleans kept');
  t.match(line!.msg as string, /^message \[card redacted\] and \[card redacted\]$/);
});

t.test('the bindings of a child are kept and the access line is as given', async (t) => {
  const { log, lines } = capture();
  log.child({ req_id: 'r-1' }).info({ method: 'POST', route: '/tokenize', status: 200, ms: 1.5, tenant: 'a-tenant-id-that-is-long' }, 'request');
  t.match(lines()[0], { req_id: 'r-1', method: 'POST', route: '/tokenize', status: 200, ms: 1.5, tenant: 'a-tenant-id-that-is-long', msg: 'request', service: 'tokenproxy' });
});
