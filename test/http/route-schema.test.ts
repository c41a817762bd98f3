/** src/http/route-schema.ts: the query as schemas see it, the default validation error, bodies the schemas only describe. */
import t from 'tap';
import { z } from 'zod';
import { ServiceError } from '../../src/errors.js';
import { parseBody, parseInput, queryObject, type RouteSchemas } from '../../src/http/route-schema.js';

t.test('queryObject: one value a string, repeated values an array, __proto__ an own member', async (t) => {
  const q = queryObject(new URLSearchParams('a=1&b=2&b=3&__proto__=x'));
  t.same(Object.keys(q), ['a', 'b', '__proto__']);
  t.same(q.b, ['2', '3']);
  t.equal(Object.getPrototypeOf(q), Object.prototype, 'the prototype is untouched');
  t.equal(Object.getOwnPropertyDescriptor(q, '__proto__')?.value, 'x');
});

t.test('the default error: validation_failed, messages by field path, never a value', async (t) => {
  const schemas: RouteSchemas = { summary: 's', responses: {}, body: { schema: z.strictObject({ n: z.number().int(), inner: z.object({ s: z.string() }) }) } };
  const err = t.throws(() => parseBody(schemas, { n: 'secret-value', inner: { s: 5 }, extra: 1 })) as ServiceError;
  t.ok(err instanceof ServiceError);
  t.equal(err.code, 'validation_failed');
  t.equal(err.detail, 'The request body failed validation');
  t.same(Object.keys(err.errors!).sort(), ['extra', 'inner.s', 'n']);
  t.same(err.errors!.extra, ['unknown field']);
  t.notOk(JSON.stringify(err.errors).includes('secret-value'), 'the value is not quoted');
  const root = t.throws(() => parseInput(schemas, 'query', z.object({ a: z.string() }), 'nope')) as ServiceError;
  t.same(Object.keys(root.errors!), ['query'], 'an issue at the root is named after the part');
});

t.test('parseBody: the parsed output when valid; untouched when the schema only describes the body', async (t) => {
  const schema = z.object({ size: z.coerce.number().default(20) });
  t.same(parseBody({ summary: 's', responses: {}, body: { schema } }, {}), { size: 20 });
  const described = { summary: 's', responses: {}, body: { schema, validate: false } };
  const body = { size: 'whatever' };
  t.equal(parseBody(described, body), body);
  t.equal(parseBody(undefined, body), body, 'a route without schemas gets the body as it is');
  const mapped: RouteSchemas = { summary: 's', responses: {}, body: { schema }, invalid: () => new ServiceError('invalid_cursor') };
  t.equal((t.throws(() => parseBody(mapped, { size: 'x' })) as ServiceError).code, 'invalid_cursor', 'a route maps the issues itself');
});
