/**
 * Route handlers of the token API: POST /tokenize, POST /tokens, GET/PATCH/DELETE /tokens/{id},
 * GET /tokens, GET and POST /tokens/search (and the /v2 paths that the original hosted service's clients use for list and search).
 * Query and search bodies are checked by the routes' zod schemas in the pipeline (route-schema.ts);
 * the token definitions are checked in the vault (src/vault/definition.ts).
 */
import { z } from 'zod';
import type { ApiContext, ApiRoute, Route } from '../http/context.js';
import { sendEmpty, sendJson } from '../http/respond.js';
import { validationFailed, type InputPart, type RouteSchemas } from '../http/route-schema.js';
import { ServiceError } from '../errors.js';
import type { TokenFilter } from '../store/types.js';
import { setOwn } from '../vault/definition.js';
import type { TokenService } from '../vault/service.js';
import { AnyJson, problem, TokenDefinition, TokenPage, TokenRecord } from './schemas.js';
import { blank, cursorParam, first, last, pageSizeParam, sizeInvalid } from './paging.js';


const oneOrMore = z.union([z.string(), z.array(z.string())]);


const METADATA_PARAM = /^metadata\..+$/s;
const LIST_PARAMS = new Set(['type', 'container', 'fingerprint', 'id', 'metadata', 'size', 'start']);

/**
 * `metadata=<JSON object of strings>`: the form the original's SDK sends (its listV2 serialises the
 * filter with JSON.stringify). Built with own properties only (a `__proto__` key stays a key).
 */
const MetadataJson = z.preprocess(
  (v) => blank(last(v as string | string[])),
  z
    .string()
    .transform((raw, ctx) => {
      let parsed: unknown;
      try {
        parsed = JSON.parse(raw);
      } catch {
        parsed = undefined;
      }
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || !Object.values(parsed).every((x) => typeof x === 'string')) {
        ctx.issues.push({ code: 'custom', input: raw, message: 'must be a JSON object of strings, e.g. {"batch":"b1"}' });
        return z.NEVER;
      }
      const out: Record<string, string> = {};
      for (const [k, x] of Object.entries(parsed as Record<string, string>)) setOwn(out, k, x);
      return out;
    })
    .optional(),
).describe('A JSON object of strings (URL-encoded), e.g. {"batch":"b1"}: every pair must match exactly; the same filter as metadata.<key>=<value>');

/**
 * The list query. Unknown parameters are found on the raw query (a parsed object would have
 * dropped a `__proto__` parameter); `metadata.<key>` parameters pass through the catchall.
 */
const ListQuery = z.preprocess(
  (q, ctx) => {
    for (const k of Object.keys(q as object)) {
      if (!LIST_PARAMS.has(k) && !METADATA_PARAM.test(k)) ctx.issues.push({ code: 'custom', input: q, path: [k], message: 'unknown parameter', params: { unknownParameter: true } });
    }
    return q;
  },
  z
    .object({
      type: oneOrMore.transform((v) => last(v)).optional().describe('token or card'),
      container: oneOrMore.transform((v) => last(v)).optional(),
      fingerprint: oneOrMore.transform((v) => last(v)).optional(),
      id: oneOrMore.transform((v) => (Array.isArray(v) ? v : [v])).optional().describe('A token id; repeat for several'),
      metadata: MetadataJson,
      size: pageSizeParam(),
      start: cursorParam(),
    })
    .catchall(oneOrMore.transform((v) => last(v))),
);

const SearchQuery = z.object({
  query: oneOrMore.transform((v) => first(v)).optional().describe('The search query, e.g. data:4242 type:card metadata.customer:"c 1"'),
  size: pageSizeParam(),
  start: cursorParam(),
});

const SearchBody = z.object({
  query: z.string({ error: 'must be a string' }).optional(),
  size: pageSizeParam((v) => v),
  start: cursorParam((v) => v),
});

const IdParams = z.object({ id: z.string().describe('The token id') });

/**
 * The errors these routes have always answered (clients key on them): an unknown list parameter,
 * a body that is not an object, a query that is not a string, a bad size, a cursor that is not a string.
 */
function pageInvalid(issues: readonly z.core.$ZodIssue[], part: InputPart): ServiceError {
  const on = (field: string) => issues.some((i) => i.path[0] === field);
  if (issues.some((i) => i.code === 'custom' && i.params?.unknownParameter)) {
    return new ServiceError('validation_failed', { detail: 'Unknown list parameter; use type, container, fingerprint, id, metadata.<key>, size, start' });
  }
  if (part === 'body' && issues.some((i) => i.path.length === 0)) {
    return new ServiceError('validation_failed', { detail: 'The body must be an object: {"query": "...", "start": null, "size": 20}' });
  }
  if (on('query')) return new ServiceError('validation_failed', { errors: { query: ['must be a string'] } });
  if (on('size')) {
    return sizeInvalid();
  }
  if (on('start')) return new ServiceError('invalid_cursor');
  return validationFailed(issues, part);
}

function listFilter(q: z.output<typeof ListQuery>): TokenFilter {
  const filter: TokenFilter = {};
  const metadata: Record<string, string> = {};
  if (q.type !== undefined) filter.type = q.type;
  if (q.container !== undefined) filter.container = q.container;
  if (q.fingerprint !== undefined) filter.fingerprint = q.fingerprint;
  if (q.id !== undefined) filter.ids = q.id;
  for (const [k, v] of Object.entries(q.metadata ?? {})) setOwn(metadata, k, v);
  for (const [k, v] of Object.entries(q)) {
    if (!METADATA_PARAM.test(k)) continue;
    const key = k.slice(9);
    // Both forms may name a key; two different values for it could never match, so say so.
    if (Object.hasOwn(metadata, key) && metadata[key] !== v) {
      throw new ServiceError('validation_failed', { detail: `metadata: the key ${JSON.stringify(key)} is given twice with different values`, errors: { metadata: ['a key is given twice with different values'] } });
    }
    setOwn(metadata, key, v as string);
  }
  if (Object.keys(metadata).length) filter.metadata = metadata;
  return filter;
}

const page = { 200: { description: 'A page of tokens, each shown by the access rule of the key', body: TokenPage } };
const record = (description: string) => ({ 200: { description, body: TokenRecord } });
const definitionBody = {
  schema: TokenDefinition,
  validate: false,
  description: 'One token definition (validated by the vault, which names every bad field: 400 validation_failed)',
} as const;

const schemas = {
  tokenize: {
    summary: 'Tokenize every definition and plain string of any JSON body, all or nothing',
    tags: ['tokens'],
    body: {
      schema: AnyJson,
      validate: false,
      description: 'Any JSON: each {type, data, …} object (a TokenDefinition) and each plain string becomes a token; the rest is kept as it is',
    },
    responses: { 200: { description: 'The same shape, with each definition replaced by its record and each plain string by its token id', body: AnyJson } },
  },
  create: {
    summary: 'Create one token',
    tags: ['tokens'],
    body: definitionBody,
    responses: { 201: { description: 'The new token (or, with deduplicate_token, the existing one)', body: TokenRecord }, 409: { ...problem('A token with this id exists (token_conflict)') } },
  },
  list: {
    summary: 'List the tokens the key may search, newest first',
    tags: ['tokens'],
    query: ListQuery,
    queryDescription: '`metadata.<key>=<value>` filters on a metadata member (repeatable, all must match); `metadata=<JSON object>` is the same filter in the form the original\'s SDK sends. Any other parameter is refused (400 validation_failed).',
    invalid: pageInvalid,
    responses: page,
  },
  searchGet: { summary: 'Search tokens with the query language', tags: ['tokens'], query: SearchQuery, invalid: pageInvalid, responses: page },
  searchPost: {
    summary: 'Search tokens with the query language (the query in the body)',
    tags: ['tokens'],
    body: { schema: SearchBody },
    invalid: pageInvalid,
    responses: page,
  },
  read: { summary: 'Read a token, shown by the access rule of the key', tags: ['tokens'], params: IdParams, responses: record('The token') },
  update: {
    summary: 'Change a token with an RFC 7396 merge patch',
    tags: ['tokens'],
    params: IdParams,
    body: {
      schema: z.record(z.string(), z.unknown()).describe('Members of a TokenDefinition to replace; null removes one. type, id and containers cannot change'),
      mediaTypes: ['application/merge-patch+json'],
      validate: false,
    },
    responses: record('The token after the patch'),
  },
  remove: { summary: 'Delete a token', tags: ['tokens'], params: IdParams, responses: { 204: { description: 'Deleted' } } },
} satisfies Record<string, RouteSchemas>;

/**
 * The token API. Every answer that reveals plaintext is audited by the token service itself
 * (src/vault/service.ts), before it is returned: no route decides whether something was a reveal.
 */
export function tokenRoutes(tokens: TokenService): Route[] {
  const list = async (ctx: ApiContext) => {
    const q = ctx.query as z.output<typeof ListQuery>;
    sendJson(ctx.res, 200, await tokens.list(ctx.principal, { filter: listFilter(q), size: q.size, start: q.start }, ctx), ctx.headers);
  };
  const searchGet = async (ctx: ApiContext) => {
    const q = ctx.query as z.output<typeof SearchQuery>;
    sendJson(ctx.res, 200, await tokens.search(ctx.principal, q.query ?? '', q.size, q.start, ctx), ctx.headers);
  };
  const searchPost = async (ctx: ApiContext) => {
    const b = ctx.body as z.output<typeof SearchBody>;
    sendJson(ctx.res, 200, await tokens.search(ctx.principal, b.query ?? '', b.size, b.start, ctx), ctx.headers);
  };
  const api = { auth: 'api', body: 'none' } as const;
  const routes: ApiRoute[] = [
    // Idempotent routes return their answer (http/idempotency.ts stores it before it is sent).
    { ...api, method: 'POST', path: '/tokenize', group: 'tokenize', body: 'json-walked', permission: 'token:create', idempotent: true, schemas: schemas.tokenize,
      handle: async (ctx) => ({ status: 200, json: await tokens.tokenize(ctx.principal, ctx.body) }) },
    { ...api, method: 'POST', path: '/tokens', group: 'tokens.create', body: 'json-walked', permission: 'token:create', idempotent: true, schemas: schemas.create,
      handle: async (ctx) => ({ status: 201, json: await tokens.create(ctx.principal, ctx.body) }) },
    { ...api, method: 'GET', path: '/tokens', group: 'tokens.list', permission: 'token:search', schemas: schemas.list, handle: list },
    { ...api, method: 'GET', path: '/v2/tokens', group: 'tokens.list', permission: 'token:search', schemas: schemas.list, handle: list },
    { ...api, method: 'GET', path: '/tokens/search', group: 'tokens.search.get', permission: 'token:search', schemas: schemas.searchGet, handle: searchGet },
    { ...api, method: 'GET', path: '/v2/tokens/search', group: 'tokens.search.get', permission: 'token:search', schemas: schemas.searchGet, handle: searchGet },
    { ...api, method: 'POST', path: '/tokens/search', group: 'tokens.search.post', body: 'json', permission: 'token:search', schemas: schemas.searchPost, handle: searchPost },
    { ...api, method: 'POST', path: '/v2/tokens/search', group: 'tokens.search.post', body: 'json', permission: 'token:search', schemas: schemas.searchPost, handle: searchPost },
    { ...api, method: 'GET', path: '/tokens/:id', group: 'tokens.read', permission: 'token:read', schemas: schemas.read,
      handle: async (ctx) => {
        sendJson(ctx.res, 200, await tokens.read(ctx.principal, ctx.params.id!, ctx), ctx.headers);
      } },
    { ...api, method: 'PATCH', path: '/tokens/:id', group: 'tokens.update', body: 'json', permission: 'token:update', idempotent: true, schemas: schemas.update,
      handle: async (ctx) => ({ status: 200, json: await tokens.update(ctx.principal, ctx.params.id!, ctx.body, ctx) }),
      // A replay shows the token again, audited as above; the stored answer holds no data.
      replayRecord: (ctx, id) => tokens.updatedView(ctx.principal, id, ctx) },
    { ...api, method: 'DELETE', path: '/tokens/:id', group: 'tokens.delete', permission: 'token:delete', schemas: schemas.remove,
      handle: async (ctx) => {
        await tokens.remove(ctx.principal, ctx.params.id!);
        sendEmpty(ctx.res, 204, ctx.headers);
      } },
  ];
  return routes;
}
