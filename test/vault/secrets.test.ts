/**
 * Secrets stay secret: after tokenizing a known card (with cvc) and a known token value, neither
 * the log output, nor the raw store (SQLite file and WAL, or every Redis value under the prefix)
 * contains the card number, the cvc, the token value or the API key. On both stores.
 */
import t, { type Test } from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { KEYS, startTestService, type TestService } from '../helpers/service.js';
import { redisSkip, startRedis, type RedisHandle } from '../helpers/redis.js';
import { cardPattern, cvcPattern, randomCard, randomCvc, randomMarker } from '../helpers/secrets.js';

// Drawn per run (issue 14): values no log line, id, timestamp or ciphertext holds by chance. The
// cvc is only looked for next to its field name (cvcPattern) or as a whole JSON value.
const NUMBER = randomCard();
const CVC = randomCvc();
const VALUE = randomMarker('ssn');

async function exercise(t: Test, s: TestService): Promise<void> {
  const r = await s.call('POST', '/tokenize', {
    body: { card: { type: 'card', data: { number: NUMBER, expiration_month: 3, expiration_year: 2031, cvc: CVC }, search_indexes: ['{{ data.number | last4 }}'] }, ssn: VALUE },
  });
  t.equal(r.status, 200);
  for (const secret of [NUMBER, VALUE]) t.notOk(r.text.includes(secret), 'not in the response');
  t.notOk(cvcPattern(CVC).test(r.text) || r.text.includes(`"${CVC}"`), 'the cvc is not in the response');
  // Reads and failures too: a reveal read, a bad card, a bad key.
  t.equal((await s.call('GET', `/tokens/${r.body.ssn}`)).body.data, VALUE);
  // Another last digit always fails Luhn ('0' was the valid one for one card in ten).
  const wrongCheck = String((Number(NUMBER.at(-1)) + 1) % 10);
  const bad = await s.call('POST', '/tokenize', { body: { type: 'card', data: { number: NUMBER.slice(0, -1) + wrongCheck, cvc: CVC } } });
  t.equal(bad.status, 400);
  t.notOk(bad.text.includes(NUMBER.slice(0, -1)), 'the rejected number is not echoed');
  await s.call('GET', '/tokens', { key: 'wrong_key_' + KEYS.private });
}

function scanLogs(t: Test, s: TestService): void {
  const logs = s.logs();
  t.ok(logs.includes('"msg":"request"'), 'requests were logged');
  for (const secret of [NUMBER, VALUE, KEYS.private]) {
    t.notOk(logs.includes(secret), `the logs do not contain a secret (${secret.length} chars)`);
  }
  t.notOk(cardPattern(NUMBER).test(logs), 'nor the card grouped or a fragment of it');
  // The cvc is 4 digits: look for it where a leak would put it, next to its name or as a whole
  // JSON string (a bare 4-digit search also hits request ids, timestamps and durations).
  t.notOk(cvcPattern(CVC).test(logs) || logs.includes(`"${CVC}"`), 'the logs do not contain the cvc');
}

t.test('embedded store: no plaintext in the database files or the logs', async (t) => {
  const s = await startTestService(t);
  await exercise(t, s);
  scanLogs(t, s);
  const files = readdirSync(s.dataDir).filter((f) => f.startsWith('tokens.db'));
  t.ok(files.includes('tokens.db'));
  let bytes = 0;
  for (const f of files) {
    const raw = readFileSync(join(s.dataDir, f));
    bytes += raw.length;
    for (const secret of [NUMBER, VALUE]) t.equal(raw.indexOf(secret), -1, `${f} does not contain the plaintext`);
    t.notOk(cvcPattern(CVC).test(raw.toString('latin1')), `${f} does not contain the cvc`);
    t.equal(raw.indexOf(KEYS.private), -1, `${f} does not contain the API key`);
  }
  t.ok(bytes > 0, 'the store files were read');
});

async function redisValues(redis: RedisHandle): Promise<string[]> {
  const client = new Redis(redis.url);
  try {
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await client.scan(cursor, 'MATCH', `${redis.prefix}*`, 'COUNT', '1000');
      cursor = next;
      keys.push(...batch);
    } while (cursor !== '0');
    const out: string[] = [...keys];
    for (const k of keys) {
      const type = await client.type(k);
      if (type === 'string') out.push((await client.get(k)) ?? '');
      else if (type === 'hash') out.push(JSON.stringify(await client.hgetall(k)));
      else if (type === 'set') out.push(...(await client.smembers(k)));
      else if (type === 'zset') out.push(...(await client.zrange(k, '0', '-1')));
      else if (type === 'list') out.push(...(await client.lrange(k, '0', '-1')));
    }
    return out;
  } finally {
    client.disconnect();
  }
}

t.test('redis store: no plaintext in any Redis value or the logs', { skip: redisSkip() }, async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const s = await startTestService(t, { redis });
  await exercise(t, s);
  scanLogs(t, s);
  const values = await redisValues(redis);
  t.ok(values.length > 5, 'keys were written under the test prefix');
  const all = values.join('\n');
  for (const secret of [NUMBER, VALUE, KEYS.private]) t.notOk(all.includes(secret), 'no plaintext in Redis');
  t.notOk(cvcPattern(CVC).test(all), 'no cvc next to its field name in Redis');
  t.notOk(values.includes(CVC), 'no Redis value is the cvc');
});
