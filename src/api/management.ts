/**
 * The management reads of the configured model, for the original service's clients:
 * the tenant's applications, proxies and reactors (page-based lists and one by id), the calling
 * key's own application, the tenant, and the permissions. Shapes: management-views.ts.
 *
 * Writes stay in the configuration file, the source of truth (reviewed, versioned, reloaded):
 * POST, PUT, PATCH and DELETE on the applications, proxies and reactors answer 405
 * managed_by_config with `Allow: GET`. The other routes under these paths (POST
 * /reactors/{id}/react…) are other paths and are not touched.
 */
import { z } from 'zod';
import type { Permission } from '../config/schema.js';
import { ServiceError } from '../errors.js';
import type { ApiContext, ApiRoute, Route } from '../http/context.js';
import { sendJson } from '../http/respond.js';
import { validationFailed, type InputPart, type RouteSchemas } from '../http/route-schema.js';
import {
  APPLICATION_TYPES, ApplicationView, PermissionView, ProxyView, ReactorView, TenantView,
  applicationView, pageOfViews, permissionViews, proxyView, reactorView,
} from './management-views.js';
import { firstDecimal, firstValue, first, pageOf, pageSizeParam, sizeInvalid } from './paging.js';
import { problem } from './schemas.js';

const oneOrMore = z.union([z.string(), z.array(z.string())]);
const many = oneOrMore.transform((v) => (Array.isArray(v) ? v : [v]));

/** Far beyond any list, and small enough that `(page - 1) * size` stays exact. */
const MAX_PAGE = 1_000_000_000;

const paging = {
  page: z.preprocess(firstDecimal, z.number().int().min(1).max(MAX_PAGE).default(1)).describe('Page number, from 1 (default 1); a page past the last is empty'),
  size: pageSizeParam(),
};
/** Application types, one or repeated; an unknown one is a 400 (as /permissions), not an empty page. */
const appType = z.enum(APPLICATION_TYPES);
const types = z.union([appType, z.array(appType)]).transform((v) => (Array.isArray(v) ? v : [v]));
const byName = oneOrMore.transform((v) => first(v)).optional().describe('Only those whose name contains this text (case-insensitive)');

const ApplicationsQuery = z.object({
  id: many.optional().describe('An application id; repeat for several'),
  type: types.optional().describe('private, public or management; repeat for several'),
  ...paging,
});
const NamedQuery = z.object({ id: many.optional().describe('An id; repeat for several'), name: byName, ...paging });
const PermissionsQuery = z.object({
  application_type: z.preprocess(firstValue, z.enum(APPLICATION_TYPES).optional())
    .describe('Only the permissions an application of this type may hold'),
});
const IdParams = z.object({ id: z.string().describe('The id') });

/** A bad page or size names the parameter and its range, like the token lists (src/api/tokens.ts). */
function pageInvalid(issues: readonly z.core.$ZodIssue[], part: InputPart): ServiceError {
  if (part === 'query' && issues.some((i) => i.path[0] === 'size')) {
    return sizeInvalid();
  }
  if (part === 'query' && issues.some((i) => i.path[0] === 'page')) {
    return new ServiceError('validation_failed', { detail: 'page must be an integer from 1', errors: { page: ['must be an integer from 1'] } });
  }
  return validationFailed(issues, part);
}

const sameId = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
const named = (q: { id?: string[] | undefined; name?: string | undefined }) => (x: { id: string; name: string }) =>
  (q.id === undefined || q.id.includes(x.id)) && (q.name === undefined || x.name.toLowerCase().includes(q.name.toLowerCase()));

function notFound(what: string): ServiceError {
  return new ServiceError('not_found', { detail: `No ${what} of this tenant has this id` });
}

const base = { auth: 'api', group: 'management', body: 'none' } as const;
const manager = { ...base, kinds: ['management'] } as const;

interface Kind {
  path: string;
  permission: Permission;
  noun: string;
  item: z.ZodType;
  query: z.ZodType<Record<string, unknown>>;
  list(ctx: ApiContext): unknown[];
  one(ctx: ApiContext, id: string): unknown;
}

const kinds: Kind[] = [
  {
    path: '/applications', permission: 'application:read', noun: 'application', item: ApplicationView, query: ApplicationsQuery,
    list: (ctx) => {
      const q = ctx.query as z.output<typeof ApplicationsQuery>;
      const t = ctx.principal.tenant;
      return t.applications
        .filter((a) => (q.id === undefined || q.id.some((id) => sameId(id, a.id))) && (q.type === undefined || q.type.includes(a.type)))
        .map((a) => applicationView(t, a));
    },
    one: (ctx, id) => {
      const t = ctx.principal.tenant;
      const a = t.applications.find((x) => sameId(x.id, id));
      return a && applicationView(t, a);
    },
  },
  {
    path: '/proxies', permission: 'proxy:read', noun: 'proxy', item: ProxyView, query: NamedQuery,
    list: (ctx) => ctx.principal.tenant.proxies.filter(named(ctx.query as z.output<typeof NamedQuery>)).map((p) => proxyView(ctx.principal.tenant, p)),
    one: (ctx, id) => {
      const p = ctx.principal.tenant.proxies.find((x) => x.id === id);
      return p && proxyView(ctx.principal.tenant, p);
    },
  },
  {
    path: '/reactors', permission: 'reactor:read', noun: 'reactor', item: ReactorView, query: NamedQuery,
    list: (ctx) => ctx.principal.tenant.reactors.filter(named(ctx.query as z.output<typeof NamedQuery>)).map((r) => reactorView(ctx.principal.tenant, r)),
    one: (ctx, id) => {
      const r = ctx.principal.tenant.reactors.find((x) => x.id === id);
      return r && reactorView(ctx.principal.tenant, r);
    },
  },
];

function readRoutes(k: Kind): ApiRoute[] {
  const listSchemas: RouteSchemas = {
    summary: `The tenant's ${k.path.slice(1)}, a page at a time (management keys, ${k.permission})`,
    tags: ['management'],
    query: k.query,
    invalid: pageInvalid,
    responses: { 200: { description: `A page of ${k.path.slice(1)}`, body: pageOfViews(k.item) } },
  };
  const oneSchemas: RouteSchemas = {
    summary: `One of the tenant's ${k.path.slice(1)} (management keys, ${k.permission})`,
    tags: ['management'],
    params: IdParams,
    responses: { 200: { description: `The ${k.noun}`, body: k.item } },
  };
  return [
    {
      ...manager, method: 'GET', path: k.path, permission: k.permission, schemas: listSchemas,
      handle: async (ctx) => {
        const q = ctx.query as { page: number; size: number };
        sendJson(ctx.res, 200, pageOf(k.list(ctx), q.page, q.size), ctx.headers);
      },
    },
    {
      ...manager, method: 'GET', path: `${k.path}/:id`, permission: k.permission, schemas: oneSchemas,
      handle: async (ctx) => {
        const found = k.one(ctx, ctx.params.id!);
        if (found === undefined) throw notFound(k.noun);
        sendJson(ctx.res, 200, found, ctx.headers);
      },
    },
  ];
}

const WRITE_METHODS = ['POST', 'PUT', 'PATCH', 'DELETE'] as const;

/** The 405 of every write of a configured resource: the config file is the source of truth. */
function refusedWrites(k: Kind): ApiRoute[] {
  const detail = `The ${k.path.slice(1)} are managed in the configuration file, the source of truth: edit it, then reload (tokenproxy reload, or SIGHUP to the main process)`;
  const schemas: RouteSchemas = {
    summary: `Refused: ${k.path.slice(1)} are written in the configuration file (405 managed_by_config)`,
    tags: ['management'],
    responses: {
      405: { ...problem('The configuration file is the source of truth (managed_by_config)'), headers: { Allow: { description: 'GET', required: true } } },
    },
  };
  return [k.path, `${k.path}/:id`].flatMap((path) => WRITE_METHODS.map((method): ApiRoute => ({
    ...base, method, path, schemas, refused: true,
    handle: async () => {
      throw new ServiceError('managed_by_config', { detail, headers: { allow: 'GET' } });
    },
  })));
}

const single = (summary: string, description: string, body: z.ZodType, extra: Partial<RouteSchemas> = {}): RouteSchemas =>
  ({ summary, tags: ['management'], responses: { 200: { description, body } }, ...extra });

export function managementRoutes(): Route[] {
  const byKey: ApiRoute = {
    // Before /applications/:id: the router takes the first route that matches.
    ...base, method: 'GET', path: '/applications/key',
    schemas: single("The calling key's own application (any key kind, no permission)", 'The application', ApplicationView),
    handle: async (ctx) => sendJson(ctx.res, 200, applicationView(ctx.principal.tenant, ctx.principal.app), ctx.headers),
  };
  const tenant: ApiRoute = {
    ...manager, method: 'GET', path: '/tenants/self', permission: 'tenant:read',
    schemas: single("The key's tenant (management keys, tenant:read)", 'The tenant', TenantView),
    handle: async (ctx) => sendJson(ctx.res, 200, { id: ctx.principal.tenant.id, name: ctx.principal.tenant.name }, ctx.headers),
  };
  const permissions: ApiRoute = {
    ...manager, method: 'GET', path: '/permissions', permission: 'permission:read',
    schemas: single('The permissions, with the application types that may hold each (management keys, permission:read)', 'The permissions', z.array(PermissionView), { query: PermissionsQuery }),
    handle: async (ctx) => sendJson(ctx.res, 200, permissionViews((ctx.query as z.output<typeof PermissionsQuery>).application_type), ctx.headers),
  };
  return [byKey, ...kinds.flatMap(readRoutes), tenant, permissions, ...kinds.flatMap(refusedWrites)];
}
