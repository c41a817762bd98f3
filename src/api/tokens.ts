/**
 * Route handlers of the token API: POST /tokenize, POST /tokens, GET/PATCH/DELETE /tokens/{id},
 * GET /tokens, GET and POST /tokens/search (and the /v2 paths that the original hosted service's clients use for list and search).
 */
import type { Context, Route } from '../http/context.js';
import { sendEmpty, sendJson } from '../http/respond.js';
import { ServiceError } from '../errors.js';
import type { TokenFilter } from '../store/types.js';
import { setOwn } from '../vault/definition.js';
import type { TokenService } from '../vault/service.js';

const DEFAULT_PAGE_SIZE = 20;
const MAX_PAGE_SIZE = 100;

function pageSize(raw: unknown): number {
  if (raw === undefined || raw === null || raw === '') return DEFAULT_PAGE_SIZE;
  const n = typeof raw === 'number' ? raw : Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > MAX_PAGE_SIZE) {
    throw new ServiceError('validation_failed', { detail: `size must be an integer from 1 to ${MAX_PAGE_SIZE}`, errors: { size: [`must be 1 to ${MAX_PAGE_SIZE}`] } });
  }
  return n;
}

function cursor(raw: unknown): string | null {
  if (raw === undefined || raw === null || raw === '') return null;
  if (typeof raw !== 'string') throw new ServiceError('invalid_cursor');
  return raw;
}

function listFilter(params: URLSearchParams): TokenFilter {
  const filter: TokenFilter = {};
  const metadata: Record<string, string> = {};
  for (const [k, v] of params) {
    if (k === 'type') filter.type = v;
    else if (k === 'container') filter.container = v;
    else if (k === 'fingerprint') filter.fingerprint = v;
    else if (k === 'id') (filter.ids ??= []).push(v);
    else if (k.startsWith('metadata.') && k.length > 9) setOwn(metadata, k.slice(9), v);
    else if (k !== 'size' && k !== 'start') {
      throw new ServiceError('validation_failed', { detail: 'Unknown list parameter; use type, container, fingerprint, id, metadata.<key>, size, start' });
    }
  }
  if (Object.keys(metadata).length) filter.metadata = metadata;
  return filter;
}

const isMergePatch = (t: string) => t === 'application/merge-patch+json';

export function tokenRoutes(tokens: TokenService): Route[] {
  const list = async (ctx: Context) => {
    const q = ctx.url.searchParams;
    sendJson(ctx.res, 200, await tokens.list(ctx.principal!, { filter: listFilter(q), size: pageSize(q.get('size') ?? undefined), start: cursor(q.get('start')) }, ctx.log), ctx.headers);
  };
  const searchGet = async (ctx: Context) => {
    const q = ctx.url.searchParams;
    sendJson(ctx.res, 200, await tokens.search(ctx.principal!, q.get('query') ?? '', pageSize(q.get('size') ?? undefined), cursor(q.get('start')), ctx.log), ctx.headers);
  };
  const searchPost = async (ctx: Context) => {
    const body = await ctx.readJson();
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw new ServiceError('validation_failed', { detail: 'The body must be an object: {"query": "...", "start": null, "size": 20}' });
    }
    const b = body as Record<string, unknown>;
    if (b.query !== undefined && typeof b.query !== 'string') throw new ServiceError('validation_failed', { errors: { query: ['must be a string'] } });
    sendJson(ctx.res, 200, await tokens.search(ctx.principal!, (b.query as string | undefined) ?? '', pageSize(b.size), cursor(b.start), ctx.log), ctx.headers);
  };
  const api = { auth: 'api' } as const;
  return [
    { ...api, method: 'POST', path: '/tokenize', group: 'tokenize', permission: 'token:create',
      handle: async (ctx) => sendJson(ctx.res, 200, await tokens.tokenize(ctx.principal!, await ctx.readJson()), ctx.headers) },
    { ...api, method: 'POST', path: '/tokens', group: 'tokens.create', permission: 'token:create',
      handle: async (ctx) => sendJson(ctx.res, 201, await tokens.create(ctx.principal!, await ctx.readJson()), ctx.headers) },
    { ...api, method: 'GET', path: '/tokens', group: 'tokens.list', permission: 'token:search', handle: list },
    { ...api, method: 'GET', path: '/v2/tokens', group: 'tokens.list', permission: 'token:search', handle: list },
    { ...api, method: 'GET', path: '/tokens/search', group: 'tokens.search.get', permission: 'token:search', handle: searchGet },
    { ...api, method: 'GET', path: '/v2/tokens/search', group: 'tokens.search.get', permission: 'token:search', handle: searchGet },
    { ...api, method: 'POST', path: '/tokens/search', group: 'tokens.search.post', permission: 'token:search', handle: searchPost },
    { ...api, method: 'POST', path: '/v2/tokens/search', group: 'tokens.search.post', permission: 'token:search', handle: searchPost },
    { ...api, method: 'GET', path: '/tokens/:id', group: 'tokens.read', permission: 'token:read',
      handle: async (ctx) => sendJson(ctx.res, 200, await tokens.read(ctx.principal!, ctx.params.id!, ctx.log), ctx.headers) },
    { ...api, method: 'PATCH', path: '/tokens/:id', group: 'tokens.update', permission: 'token:update',
      handle: async (ctx) => sendJson(ctx.res, 200, await tokens.update(ctx.principal!, ctx.params.id!, await ctx.readJson(isMergePatch), ctx.log), ctx.headers) },
    { ...api, method: 'DELETE', path: '/tokens/:id', group: 'tokens.delete', permission: 'token:delete',
      handle: async (ctx) => {
        await tokens.remove(ctx.principal!, ctx.params.id!);
        sendEmpty(ctx.res, 204, ctx.headers);
      } },
  ];
}
