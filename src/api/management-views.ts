/**
 * What the management routes show of the configured model, in the original service's
 * shapes and snake_case names, so that its clients' strict response schemas accept them: no field
 * they do not know, and never an API or proxy key (nor a digest), credentials or a query of a
 * destination URL, code, a file path of the host, or a configuration value.
 */
import { z } from 'zod';
import type { Application, ProxySummary, ReactorSummary, Tenant } from '../auth/tenancy.js';
import { PERMISSIONS, PUBLIC_PERMISSIONS, TYPE_ONLY_PERMISSIONS, type Permission } from '../config/schema.js';

export const APPLICATION_TYPES = ['private', 'public', 'management'] as const;
export type ApplicationTypeName = (typeof APPLICATION_TYPES)[number];

/**
 * Shown in place of every reactor configuration value: the config has no way to mark a value as
 * not secret, so none is shown, only the names.
 */
export const REDACTED = '[redacted]';

const AccessRuleView = z.object({
  priority: z.number().int(),
  container: z.string(),
  transform: z.enum(['reveal', 'mask', 'redact']),
  permissions: z.array(z.string()),
});

export const ApplicationView = z
  .object({
    id: z.string(),
    tenant_id: z.string(),
    name: z.string(),
    type: z.enum(APPLICATION_TYPES),
    permissions: z.array(z.string()).describe('What the application holds, with the management reads it holds implicitly (docs/concepts.md)'),
    rules: z.array(AccessRuleView),
  })
  .meta({ id: 'Application', description: 'A configured application, without its keys' });

const TransformView = z.object({
  type: z.string().describe('code, tokenize, detokenize, mask, append_json or append_header'),
  matcher: z.string().optional().describe('mask: always regex'),
  expression: z.string().optional().describe('mask: the pattern'),
  replacement: z.string().optional().describe('mask: the character'),
  options: z.object({ identifier: z.string().optional(), location: z.string().optional() }).optional()
    .describe('tokenize: the identifier; append_json: the location; append_header: the header name (as location). Code and appended values are never shown'),
});

export const ProxyView = z
  .object({
    id: z.string(),
    tenant_id: z.string(),
    name: z.string(),
    destination_url: z.string().describe('Without credentials, query or fragment (each may hold a secret); the path is shown'),
    require_auth: z.boolean(),
    request_transforms: z.array(TransformView),
    response_transforms: z.array(TransformView),
  })
  .meta({ id: 'Proxy', description: 'A configured proxy, without its key, code or configuration values' });

export const ReactorView = z
  .object({
    id: z.string(),
    tenant_id: z.string(),
    name: z.string(),
    configuration: z.record(z.string(), z.literal(REDACTED)).describe(`The names of its configuration entries; every value is shown as ${REDACTED}`),
    runtime: z.object({
      timeout: z.number().describe('Seconds'),
      warm_concurrency: z.number().int(),
    }),
  })
  .meta({ id: 'Reactor', description: 'A configured reactor, without its code or configuration values' });

export const TenantView = z.object({ id: z.string(), name: z.string() }).meta({ id: 'Tenant' });

export const PermissionView = z
  .object({ type: z.enum(PERMISSIONS), description: z.string(), application_types: z.array(z.enum(APPLICATION_TYPES)) })
  .meta({ id: 'Permission' });

export const PagePagination = z
  .object({ total_items: z.number().int(), page_number: z.number().int(), page_size: z.number().int(), total_pages: z.number().int() })
  .meta({ id: 'PagePagination', description: 'A page-based list: a page past the last is empty, with the same totals' });

export const pageOfViews = (item: z.ZodType) => z.object({ pagination: PagePagination, data: z.array(item) });

export function applicationView(t: Tenant, a: Application): z.output<typeof ApplicationView> {
  return {
    id: a.id, tenant_id: t.id, name: a.name, type: a.type, permissions: [...a.permissions],
    rules: a.rules.map((r) => ({ priority: r.priority, container: r.container, transform: r.transform, permissions: [...r.permissions] })),
  };
}

export function proxyView(t: Tenant, p: ProxySummary): z.output<typeof ProxyView> {
  return {
    id: p.id, tenant_id: t.id, name: p.name, destination_url: p.destination_url, require_auth: p.require_auth,
    request_transforms: p.request_transforms.map((x) => ({ ...x })), response_transforms: p.response_transforms.map((x) => ({ ...x })),
  };
}

export function reactorView(t: Tenant, r: ReactorSummary): z.output<typeof ReactorView> {
  return {
    id: r.id, tenant_id: t.id, name: r.name,
    configuration: Object.fromEntries(r.configuration_names.map((n) => [n, REDACTED] as const)),
    runtime: { timeout: r.timeout_ms / 1000, warm_concurrency: r.warm_concurrency },
  };
}

const DESCRIPTIONS: Record<Permission, string> = {
  'token:create': 'Create tokens (POST /tokens, /tokenize)',
  'token:read': "Read tokens, shown by the access rule's transform",
  'token:update': 'Change tokens (PATCH /tokens/{id})',
  'token:delete': 'Delete tokens',
  'token:search': 'List and search tokens',
  'proxy:invoke': 'Call a proxy that requires an API key, and the outbound proxy',
  'reactor:invoke': 'Run reactors',
  'token:use': 'Use tokens inside the service: detokenization, proxy transforms, reactor args',
  'log:read': 'Read the audit trail (GET /logs)',
  'application:read': 'Read the applications (GET /applications, /applications/{id})',
  'proxy:read': 'Read the proxies (GET /proxies, /proxies/{id})',
  'reactor:read': 'Read the reactors (GET /reactors, /reactors/{id})',
  'tenant:read': 'Read the tenant (GET /tenants/self)',
  'permission:read': 'List the permissions (GET /permissions)',
};

/** The application types that may hold `p`: the same rules the config check applies (src/config/load.ts). */
function typesOf(p: Permission): Array<ApplicationTypeName> {
  const only = TYPE_ONLY_PERMISSIONS.find((x) => x.permission === p)?.type;
  return APPLICATION_TYPES.filter((type) => (type === 'public' ? PUBLIC_PERMISSIONS.includes(p) : only === undefined || only === type));
}

export function permissionViews(type: ApplicationTypeName | undefined): Array<z.output<typeof PermissionView>> {
  return PERMISSIONS.map((p) => ({ type: p, description: DESCRIPTIONS[p], application_types: typesOf(p) }))
    .filter((v) => type === undefined || v.application_types.includes(type));
}
