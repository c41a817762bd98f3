/**
 * Read-only management routes for management keys: the tenant's configured applications,
 * proxies and reactors, with every key, secret, code and configuration value left out.
 */
import type { Tenant } from '../auth/tenancy.js';
import type { Route } from '../http/context.js';
import { sendJson } from '../http/respond.js';
import type { RouteSchemas } from '../http/route-schema.js';
import { z } from 'zod';

const Rule = z.object({ priority: z.number().int(), container: z.string(), permissions: z.array(z.string()), transform: z.string() });
const bodies = {
  applications: z.object({
    id: z.string(), name: z.string(), type: z.enum(['private', 'public', 'management']), permissions: z.array(z.string()),
    rules: z.array(Rule), legacy: z.boolean(),
  }),
  proxies: z.object({
    id: z.string(), name: z.string(), destination_url: z.string().describe('Without credentials or query'), require_auth: z.boolean(),
    timeout_ms: z.number().int(), leak_guard: z.enum(['off', 'log', 'block']), request_transforms: z.array(z.string()), response_transforms: z.array(z.string()),
  }),
  reactors: z.object({
    id: z.string(), name: z.string(), timeout_ms: z.number().int(), warm_concurrency: z.number().int(),
    max_concurrency: z.number().int(), memory_limit_mb: z.number(),
  }),
};

function schemasOf(name: keyof typeof bodies): RouteSchemas {
  return {
    summary: `The tenant's ${name}, without keys, secrets, code or configuration values (management keys)`,
    tags: ['management'],
    responses: { 200: { description: `The ${name}`, body: z.object({ data: z.array(bodies[name]) }) } },
  };
}

const views = {
  applications: (t: Tenant) =>
    t.applications.map((a) => ({ id: a.id, name: a.name, type: a.type, permissions: a.permissions, rules: a.rules, legacy: a.legacy })),
  // The compiled proxy's settings: its destination without credentials or query (either may hold a secret).
  proxies: (t: Tenant) =>
    t.proxies.map((p) => ({
      id: p.id, name: p.name, destination_url: p.destination_url, require_auth: p.require_auth, timeout_ms: p.timeout_ms,
      leak_guard: p.leak_guard, request_transforms: p.request_transforms, response_transforms: p.response_transforms,
    })),
  reactors: (t: Tenant) =>
    t.reactors.map((r) => ({
      id: r.id, name: r.name, timeout_ms: r.timeout_ms, warm_concurrency: r.warm_concurrency,
      max_concurrency: r.max_concurrency, memory_limit_mb: r.memory_limit_mb,
    })),
};

export function managementRoutes(): Route[] {
  return (Object.keys(views) as Array<keyof typeof views>).map((name) => ({
    method: 'GET',
    path: `/${name}`,
    group: 'management',
    auth: 'api',
    body: 'none',
    kinds: ['management'],
    schemas: schemasOf(name),
    handle: async (ctx) => sendJson(ctx.res, 200, { data: views[name](ctx.principal.tenant) }, ctx.headers),
  }));
}
