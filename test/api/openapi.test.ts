/**
 * GET /openapi.json: a valid OpenAPI 3.1 document (checked by a maintained validator) that lists
 * every route of the router, made from the schemas that validate requests; and the answers of
 * every route and every error status, over real HTTP, match it.
 */
import t from 'tap';
import { Validator } from '@seriousme/openapi-schema-validator';
import { catalogue } from '../../src/errors.js';
import { openApiDocument, openApiMethods, openApiPath } from '../../src/api/openapi.js';
import { problem } from '../../src/api/schemas.js';
import { checkResponses, OpenApiChecker } from '../helpers/openapi.js';
import { baseConfig, KEYS, startTestService } from '../helpers/service.js';
import { startUpstream } from '../helpers/upstream.js';

const PROXY_KEY = 'proxy_key_openapi_0123456789abcdef';
const MANAGEMENT_KEY = 'test_management_key_0123456789abcdef';
const AUDIT_KEY = 'test_audit_key_0123456789abcdef0000';

function config(upstream: string, rateLimited = false): any {
  const cfg = baseConfig() as any;
  cfg.tenants[0].applications.push({ id: 'aaaaaaaa-0000-4000-8000-0000000000aa', name: 'mgmt', type: 'management', keys: [MANAGEMENT_KEY] });
  cfg.tenants[0].applications.push({ id: 'aaaaaaaa-0000-4000-8000-0000000000ab', name: 'auditor', type: 'management', keys: [AUDIT_KEY], permissions: ['log:read'] });
  cfg.tenants[0].proxies = [{ id: 'echo', name: 'echo', key: PROXY_KEY, destination_url: `${upstream}/api/` }];
  cfg.tenants[0].reactors = [{ id: 'echo', name: 'echo', code: 'module.exports = async function (req) { return { raw: req.args }; };' }];
  if (rateLimited) cfg.rate_limits = { enabled: true, store: 'memory' };
  return cfg;
}

t.test('the document', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, { config: config(up.url) });
  const res = await fetch(`${s.url}/openapi.json`);
  t.equal(res.status, 200, 'open: no key');
  t.match(res.headers.get('content-type'), /^application\/json/);
  const doc = (await res.json()) as any;
  t.equal(doc.openapi, '3.1.0');

  const result = await new Validator().validate(doc);
  t.same(result, { valid: true }, 'valid OpenAPI 3.1');
  const broken = structuredClone(doc);
  broken.paths['/tokens'].get.responses = 'none';
  t.equal((await new Validator().validate(broken)).valid, false, 'the validator does refuse a broken document');

  t.ok(s.svc.routes.length >= 15, `the router has ${s.svc.routes.length} routes`);
  for (const route of s.svc.routes) {
    for (const m of openApiMethods(route.method)) {
      t.ok(doc.paths[openApiPath(route.path)]?.[m], `${m.toUpperCase()} ${route.path} is documented`);
    }
  }
  for (const p of ['/healthz', '/readyz', '/tokenize', '/tokens', '/tokens/{id}', '/tokens/search', '/v2/tokens', '/v2/tokens/search', '/reactors/{id}/react', '/applications', '/proxies', '/reactors', '/proxy/{path}', '/openapi.json',
    // issue 28: the management reads
    '/applications/{id}', '/applications/key', '/proxies/{id}', '/reactors/{id}', '/tenants/self', '/permissions']) {
    t.ok(doc.paths[p], `${p} is there`);
  }

  t.same(doc.components.securitySchemes.ApiKey, { type: 'apiKey', in: 'header', name: 'SVC-API-KEY', description: doc.components.securitySchemes.ApiKey.description });
  t.equal(doc.components.securitySchemes.ProxyKey.name, 'SVC-PROXY-KEY');
  t.same(doc.components.schemas.Problem.properties.code.enum, Object.keys(catalogue), 'every error code is in the problem schema');
  t.same(doc.components.schemas.ProxyError.properties.proxy_error, { $ref: '#/components/schemas/Problem' });
  const list = doc.paths['/tokens'].get;
  t.same(list.security, [{ ApiKey: [] }]);
  t.same(Object.keys(list.responses['200'].headers), ['SVC-Trace-Id', 'RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']);
  t.ok(list.responses['429'].headers['Retry-After'], 'the 429 carries Retry-After');
  t.same(list.responses['401'].content, { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } });
  t.same(list.parameters.find((p: any) => p.name === 'size').schema, { description: 'Page size, 1 to 100 (default 20)', default: 20, type: 'integer', minimum: 1, maximum: 100 }, 'made from the zod schema that validates the query');
  const proxy = doc.paths['/proxy/{path}'].post;
  t.same(proxy.responses['401'].content, { 'application/json': { schema: { $ref: '#/components/schemas/ProxyError' } } }, 'proxy errors are wrapped');
  t.ok(proxy.responses.default.headers['SVC-PROXY-DESTINATION-STATUS'], "the destination's answer carries its status");
  t.same(doc.paths['/openapi.json'].get.security, [], 'the document is open');
  t.notOk(JSON.stringify(doc).includes(PROXY_KEY) || JSON.stringify(doc).includes(KEYS.private), 'no key in the document');
});

t.test('every route and every error status answers as documented', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, { config: config(up.url) });
  const checker = await checkResponses(s);

  // Each route once.
  t.equal((await s.call('GET', '/healthz', { key: null })).status, 200);
  t.equal((await s.call('GET', '/readyz', { key: null })).status, 200);
  t.equal((await s.call('GET', '/openapi.json', { key: null })).status, 200);
  t.equal((await s.call('POST', '/tokenize', { body: { a: 'x', b: { type: 'token', data: 'y' } } })).status, 200);
  const created = await s.call('POST', '/tokens', { body: { type: 'card', data: { number: '4242424242424242', expiration_month: 1, expiration_year: 2040, cvc: '123' } } });
  t.equal(created.status, 201);
  const id = created.body.id as string;
  t.equal((await s.call('GET', `/tokens/${id}`)).status, 200);
  t.equal((await s.call('GET', `/tokens/${id}`, { key: KEYS.masked })).status, 200);
  t.equal((await s.call('PATCH', `/tokens/${id}`, { raw: JSON.stringify({ metadata: { a: 'b' } }), headers: { 'content-type': 'application/merge-patch+json' } })).status, 200);
  t.equal((await s.call('GET', '/tokens?size=1&type=card&metadata.a=b')).status, 200);
  t.equal((await s.call('GET', `/v2/tokens?metadata=${encodeURIComponent('{"a":"b"}')}`)).status, 200, 'the metadata filter as the SDK sends it (issue 28)');
  t.equal((await s.call('GET', '/logs?size=1', { key: AUDIT_KEY })).status, 200);
  t.equal((await s.call('GET', '/logs/entity-types', { key: AUDIT_KEY })).status, 200);
  t.equal((await s.call('GET', `/logs?size=1&page=2&entity_id=${id}&end_date=2100-01-01`, { key: AUDIT_KEY })).status, 200, 'GET /logs by page number (issue 28)');
  t.equal((await s.call('GET', '/v2/tokens')).status, 200);
  t.equal((await s.call('GET', '/tokens/search?query=type:card')).status, 200);
  t.equal((await s.call('GET', '/v2/tokens/search?query=type:card')).status, 200);
  t.equal((await s.call('POST', '/tokens/search', { body: { query: 'type:card', size: 5 } })).status, 200);
  t.equal((await s.call('POST', '/v2/tokens/search', { body: {} })).status, 200);
  t.equal((await s.call('POST', '/reactors/echo/react', { body: { args: { a: 1 } } })).status, 200);
  for (const p of ['/applications', '/proxies', '/reactors']) t.equal((await s.call('GET', p, { key: MANAGEMENT_KEY })).status, 200, p);
  // issue 28: the management reads and the 405 of a write
  for (const p of ['/applications/aaaaaaaa-0000-4000-8000-0000000000aa', '/applications/key', '/proxies/echo', '/reactors/echo', '/tenants/self', '/permissions?application_type=public', '/reactors?page=2&size=1']) {
    t.equal((await s.call('GET', p, { key: MANAGEMENT_KEY })).status, 200, p);
  }
  for (const [m, p, status] of [['DELETE', '/proxies/echo', 405], ['GET', '/reactors/nope', 404], ['GET', '/proxies?size=0', 400]] as const) {
    t.equal((await s.call(m, p, { key: MANAGEMENT_KEY })).status, status, `${m} ${p}`);
  }
  const proxied = await s.call('POST', '/proxy/things', { body: { a: 1 }, headers: { 'svc-proxy-key': PROXY_KEY } });
  t.equal(proxied.headers.get('svc-proxy-destination-status'), String(proxied.status), "the destination's answer");
  t.equal((await s.call('DELETE', `/tokens/${id}`)).status, 204);

  // Each error status, with the codes the API has always answered.
  const code = async (status: number, c: string, r: Promise<{ status: number; body: any }>) => {
    const got = await r;
    t.equal(got.status, status, c);
    t.equal(got.body?.code ?? got.body?.proxy_error?.code, c);
    return got.body;
  };
  t.same(await code(400, 'validation_failed', s.call('GET', '/tokens?size=0')), {
    type: 'urn:tokenproxy:problem:validation_failed', title: catalogue.validation_failed.title, status: 400,
    detail: 'size must be an integer from 1 to 100', code: 'validation_failed', errors: { size: ['must be 1 to 100'] },
  });
  t.equal((await code(400, 'validation_failed', s.call('GET', '/v2/tokens/search?size=abc'))).errors.size[0], 'must be 1 to 100');
  t.equal((await code(400, 'validation_failed', s.call('GET', '/tokens?colour=red'))).detail, 'Unknown list parameter; use type, container, fingerprint, id, metadata.<key>, size, start');
  t.equal((await code(400, 'validation_failed', s.call('GET', '/tokens?metadata.=x'))).detail, 'Unknown list parameter; use type, container, fingerprint, id, metadata.<key>, size, start');
  t.equal((await code(400, 'validation_failed', s.call('POST', '/tokens/search', { body: [1] }))).detail, 'The body must be an object: {"query": "...", "start": null, "size": 20}');
  t.same((await code(400, 'validation_failed', s.call('POST', '/tokens/search', { body: { query: 5 } }))).errors, { query: ['must be a string'] });
  t.same((await code(400, 'validation_failed', s.call('POST', '/tokens/search', { body: { query: null } }))).errors, { query: ['must be a string'] });
  t.equal((await code(400, 'validation_failed', s.call('POST', '/tokens/search', { body: { size: 101 } }))).detail, 'size must be an integer from 1 to 100');
  await code(400, 'invalid_cursor', s.call('POST', '/tokens/search', { body: { start: 5 } }));
  await code(400, 'invalid_cursor', s.call('GET', '/tokens?start=garbage!'));
  t.same((await code(400, 'validation_failed', s.call('GET', '/logs?start_date=yesterday', { key: AUDIT_KEY }))).errors, { start_date: ['must be an ISO 8601 date or time'] });
  t.equal((await code(400, 'validation_failed', s.call('POST', '/reactors/echo/react', { body: [] }))).detail, 'The body must be an object: {"args": …}');
  await code(400, 'invalid_json', s.call('POST', '/tokenize', { raw: '{', headers: { 'content-type': 'application/json' } }));
  await code(400, 'validation_failed', s.call('POST', '/tokens', { body: { type: 'card', data: { number: '4242424242424241' } } }));
  t.equal((await code(400, 'validation_failed', s.call('GET', '/tokens?__proto__=x'))).detail, 'Unknown list parameter; use type, container, fingerprint, id, metadata.<key>, size, start');
  t.equal((await s.call('GET', '/tokens?metadata.__proto__=x&metadata.constructor=y')).status, 200, 'metadata keys are data, never object members');
  t.equal((await s.call('GET', '/tokens?size=2&size=500&start=')).status, 200, 'the first size counts; an empty start is none');
  await s.call('POST', '/tokens', { body: { type: 'token', data: 'x', id: 'fixed-id-1' } });
  await code(409, 'token_conflict', s.call('POST', '/tokens', { body: { type: 'token', data: 'x', id: 'fixed-id-1' } }));
  await code(401, 'missing_api_key', s.call('GET', '/tokens', { key: null }));
  await code(401, 'invalid_api_key', s.call('GET', '/tokens', { key: 'not-a-key-0000000000000000' }));
  await code(401, 'missing_proxy_key', s.call('GET', '/proxy/x', { key: null }));
  await code(403, 'forbidden', s.call('DELETE', '/tokens/whatever', { key: KEYS.noPerm }));
  await code(403, 'forbidden', s.call('GET', '/applications'));
  await code(404, 'not_found', s.call('GET', '/tokens/no-such-token'));
  await code(404, 'not_found', s.call('POST', '/reactors/nope/react', { body: { args: 1 } }));
  await code(404, 'route_not_found', s.call('GET', '/nowhere'));
  const m = await s.call('PUT', '/tokens');
  await code(405, 'method_not_allowed', Promise.resolve(m));
  t.equal(m.headers.get('allow'), 'POST, GET');
  await code(413, 'body_too_large', s.call('POST', '/tokens/search', { raw: JSON.stringify({ query: 'x'.repeat(6 * 1024 * 1024) }), headers: { 'content-type': 'application/json' } }));
  await code(415, 'unsupported_media_type', s.call('POST', '/tokens/search', { raw: 'query', headers: { 'content-type': 'text/plain' } }));
  await code(415, 'unsupported_media_type', s.call('PATCH', '/tokens/x', { body: {} }));
  t.ok(checker.doc.paths['/tokens'], 'the checker ran on the served document');
});

t.test('a 429 and its headers are as documented', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, { config: config(up.url, true) });
  await checkResponses(s);
  let last = await s.call('GET', '/tokens');
  t.equal(last.status, 200);
  t.ok(last.headers.get('ratelimit-limit'), 'RateLimit-Limit on a counted answer');
  const limit = Number(last.headers.get('ratelimit-limit'));
  for (let i = 0; i < limit + 1 && last.status !== 429; i++) last = await s.call('GET', '/tokens');
  t.equal(last.status, 429);
  t.equal(last.body.code, 'rate_limited');
  t.ok(last.headers.get('retry-after'));
});

t.test('a route without schemas works and is listed with a generic description', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, { config: config(up.url) });
  const bare = { method: 'POST', path: '/things/:id', group: 'tokens.create', auth: 'api', body: 'none', handle: async () => {} } as const;
  const keyed = {
    ...bare, path: '/keyed',
    schemas: { summary: 'k', requestHeaders: { 'SVC-IDEMPOTENCY-KEY': { description: 'd' } }, responses: { 409: problem('in flight') } },
  };
  const doc = openApiDocument([...s.svc.routes, bare, keyed], { version: '0' }) as any;
  t.same(await new Validator().validate(doc), { valid: true });
  const op = doc.paths['/things/{id}'].post;
  t.match(op.description, /declares no schemas/);
  t.same(op.parameters, [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }, { $ref: '#/components/parameters/TraceId' }]);
  const k = doc.paths['/keyed'].post;
  t.same(k.parameters[0], { name: 'SVC-IDEMPOTENCY-KEY', in: 'header', required: false, description: 'd', schema: { type: 'string' } }, 'a request header a route declares');
  t.same(k.responses['409'].content, { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } });
  t.same(Object.keys(op.responses).sort(), ['400', '401', '403', '404', '413', '415', '429', '503', 'default']);
});

t.test('the checker refuses answers the document does not allow', async (t) => {
  const up = await startUpstream(t);
  const s = await startTestService(t, { config: config(up.url) });
  const checker = await OpenApiChecker.load(s.url);
  const ok = await s.call('GET', '/healthz', { key: null });
  t.same(checker.problems('GET', '/healthz', ok), []);
  const json = new Headers({ 'content-type': 'application/json' });
  t.match(checker.problems('GET', '/healthz', { status: 200, headers: json, text: '{"status":"fine"}' })[0], /status/, 'a wrong value');
  t.match(checker.problems('GET', '/tokens/x', { status: 200, headers: json, text: '{"id":"x"}' })[0], /must have required property/, 'a record without its fields');
  t.match(checker.problems('GET', '/tokens/x', { status: 401, headers: json, text: '{}' })[0], /Content-Type/, 'a problem as application/json');
  t.match(checker.problems('GET', '/tokens', { status: 429, headers: new Headers({ 'content-type': 'application/problem+json' }), text: JSON.stringify({ type: 'x', title: 't', status: 429, detail: 'd', code: 'rate_limited' }) })[0], /Retry-After/);
  t.match(checker.problems('DELETE', '/tokens/x', { status: 204, headers: new Headers(), text: 'x' })[0], /body/);
  t.match(checker.problems('GET', '/nowhere', { status: 200, headers: json, text: '{}' })[0], /not in the document/);
  t.match(checker.problems('GET', '/healthz', { status: 201, headers: json, text: '{}' })[0], /Content-Type application\/json not in application\/problem\+json/, 'an undocumented status is an error answer');
});
