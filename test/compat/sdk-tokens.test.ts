/**
 * The original hosted service's Node SDK against tokenproxy, as a team moving over would use it
 * (base URL and header prefix changed, test/helpers/sdk.ts): the token calls, each answer checked
 * for what the SDK hands its caller, and the list iterators run to their end.
 */
import t from 'tap';
import { BasisTheoryError } from '@basis-theory/node-sdk';
import { KEYS, startTestService } from '../helpers/service.js';
import { sdkClient } from '../helpers/sdk.js';
import { randomCard, randomMarker } from '../helpers/secrets.js';

t.test('token calls through the SDK', async (t) => {
  const svc = await startTestService(t);
  const { client } = sdkClient(svc.url, KEYS.private);
  const card = randomCard('4');
  const batch = randomMarker('batch');

  const created = await client.tokens.create({
    type: 'card',
    data: { number: card, expiration_month: 12, expiration_year: 2031, cvc: '123' },
    metadata: { batch },
    searchIndexes: ['{{ data.number | last4 }}'],
  });
  t.match(created.id, /^[0-9a-f-]{36}$/, 'create answers the token id');
  t.equal(created.type, 'card');
  t.same(created.metadata, { batch }, 'metadata comes back');
  t.same(created.searchIndexes, ['{{ data.number | last4 }}'], 'search indexes come back, camelCased by the SDK');
  t.notOk(JSON.stringify(created).includes(card), 'the create answer does not carry the card number');
  t.notOk(JSON.stringify(created).includes('cvc'), 'nor the cvc');

  const read = await client.tokens.get(created.id!);
  t.equal((read.data as Record<string, unknown>).number, card, 'a reveal key reads the card');
  t.equal((read.data as Record<string, unknown>).cvc, undefined, 'the cvc is never returned on read');
  t.ok(read.createdAt instanceof Date || typeof read.createdAt === 'string', 'created_at parses');

  const masked = await sdkClient(svc.url, KEYS.masked).client.tokens.get(created.id!);
  t.equal((masked.data as Record<string, unknown>).number, `${'X'.repeat(12)}${card.slice(-4)}`, 'a mask key reads the masked number');

  const text = await client.tokens.create({ type: 'token', data: 'hello', metadata: { batch } });
  const updated = await client.tokens.update(text.id!, { metadata: { batch, step: 'two' } });
  t.same(updated.metadata, { batch, step: 'two' }, 'update merges metadata');

  const tokenized = (await client.tokens.tokenize({ a: 'plain', b: { type: 'token', data: 'x' } })) as Record<string, unknown>;
  t.match(tokenized.a, /^[0-9a-f-]{36}$/, 'tokenize: a string becomes a token id');
  t.match((tokenized.b as Record<string, unknown>).id, /^[0-9a-f-]{36}$/, 'tokenize: an object becomes a token record');

  const detokenized = (await client.tokens.detokenize({ v: `{{ token: ${text.id} | json: '$.data' }}` })) as Record<string, unknown>;
  t.same(detokenized, { v: 'hello' }, 'detokenize swaps the expression for the value');

  await client.tokens.delete(text.id!);
  const gone = await client.tokens.get(text.id!).then(
    () => null,
    (err: unknown) => err,
  );
  t.ok(gone instanceof BasisTheoryError, 'a deleted token: the SDK throws its error type');
  t.equal((gone as BasisTheoryError).statusCode, 404, 'with status 404');
});

t.test('list and search iterate to the last item and stop', async (t) => {
  const svc = await startTestService(t);
  const { client, requests } = sdkClient(svc.url, KEYS.private);
  const batch = randomMarker('batch');
  const ids = new Set<string>();
  // 230 tokens: more than two full pages of 100, so the iterator must follow two cursors.
  for (let i = 0; i < 23; i++) {
    const body: Record<string, unknown> = {};
    for (let j = 0; j < 10; j++) body[`k${j}`] = { type: 'token', data: `v-${i}-${j}`, metadata: { batch } };
    const out = (await client.tokens.tokenize(body)) as Record<string, { id: string }>;
    for (const v of Object.values(out)) ids.add(v.id);
  }
  t.equal(ids.size, 230);

  const listed: string[] = [];
  for await (const token of await client.tokens.listV2({ size: 100 })) listed.push(token.id!);
  t.equal(listed.length, 230, 'listV2 yields every token once');
  t.same(new Set(listed), ids, 'and exactly the tokens created');
  t.equal(requests.filter((r) => r.url.includes('/v2/tokens')).length, 3, 'three pages were asked for, then it stopped');

  const found: string[] = [];
  for await (const token of await client.tokens.searchV2({ query: `metadata.batch:${batch}`, size: 100 })) found.push(token.id!);
  t.equal(found.length, 230, 'searchV2 yields every match once');
  t.same(new Set(found), ids);
});

t.test('typed tokens and alias ids through the SDK (issue 26)', async (t) => {
  const svc = await startTestService(t);
  const { client } = sdkClient(svc.url, KEYS.private);
  const card = randomCard('5');
  const batch = randomMarker('typed');

  const ssn = await client.tokens.create({ type: 'social_security_number', data: '536-22-8711', id: '{{ data | alias_preserve_format: 0, 4 }}', metadata: { batch } });
  t.match(ssn.id, /^\d{3}-\d{2}-8711$/, 'create: an SSN-shaped alias');
  t.equal(ssn.type, 'social_security_number');
  t.same(ssn.containers, ['/pii/high/'], 'the type\'s default container');
  const cn = await client.tokens.create({ type: 'card_number', data: card, id: '{{ data | alias_card }}', metadata: { batch } });
  t.equal(cn.id!.slice(0, 6) + cn.id!.slice(-4), card.slice(0, 6) + card.slice(-4), 'create: a card-shaped alias');
  t.not(cn.id, card);

  t.equal((await client.tokens.get(ssn.id!)).data, '536-22-8711', 'get by alias: the value for a reveal key');
  t.equal((await sdkClient(svc.url, KEYS.masked).client.tokens.get(ssn.id!)).data, 'XXX-XX-8711', 'the type\'s mask for a mask key');

  const updated = await client.tokens.update(cn.id!, { metadata: { batch, step: 'two' } });
  t.same(updated.metadata, { batch, step: 'two' }, 'update by alias');

  const found: string[] = [];
  for await (const token of await client.tokens.searchV2({ query: `type:card_number metadata.batch:${batch}`, size: 10 })) found.push(token.id!);
  t.same(found, [cn.id], 'search by type');
  const listed: string[] = [];
  for await (const token of await client.tokens.listV2({ size: 100 })) listed.push(token.id!);
  t.same(new Set(listed), new Set([ssn.id, cn.id]), 'listV2 yields the aliases');

  await client.tokens.delete(cn.id!);
  const gone = await client.tokens.get(cn.id!).then(() => null, (err: unknown) => err);
  t.equal((gone as BasisTheoryError).statusCode, 404, 'delete by alias');
  t.notOk(svc.logs().includes(card), 'no card number in the logs');
});
