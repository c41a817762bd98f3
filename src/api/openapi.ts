/**
 * GET /openapi.json: the OpenAPI 3.1 document of every route of the router, made from the zod
 * schemas the routes validate with (src/http/route-schema.ts). The error answers every route of
 * its kind can give (401/403 for keyed routes, 429 for rate-limited ones, 400/413/415 for bodies…)
 * are added here from the route's own settings, so a route only declares what is its own. A route
 * without schemas is listed with a generic description. Open (no key) and never rate limited.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import type { Route } from '../http/context.js';
import { sendJson } from '../http/respond.js';
import type { ResponseSpec, RouteSchemas } from '../http/route-schema.js';
import { Problem, ProxyError } from './schemas.js';

type Json = Record<string, unknown>;

/** Every method a `*` route answers, as OpenAPI path items name them. */
const ALL_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;

const PROBLEM_TYPE = 'application/problem+json';

/** `/tokens/:id` → `/tokens/{id}`; a trailing `*` → `{path}`. */
export function openApiPath(routePath: string): string {
  return routePath.replace(/:([A-Za-z0-9_]+)/g, '{$1}').replace(/\/\*$/, '/{path}');
}

/** The document's methods of a route (`*` is every method). */
export function openApiMethods(method: string): string[] {
  return method === '*' ? [...ALL_METHODS] : [method.toLowerCase()];
}

/** Converts zod schemas to JSON Schema, collecting named ones (`.meta({ id })`) as components. */
class SchemaSet {
  readonly components: Record<string, Json> = {};

  convert(schema: z.ZodType, io: 'input' | 'output'): Json {
    const json = z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any' }) as Json;
    const defs = (json.$defs ?? {}) as Record<string, Json>;
    delete json.$defs;
    delete json.$schema;
    for (const [id, def] of Object.entries(defs)) {
      const fixed = relink(def) as Json;
      const known = this.components[id];
      if (known && JSON.stringify(known) !== JSON.stringify(fixed)) {
        throw new Error(`Two different schemas are named ${id} (a request and a response one? give them distinct ids)`);
      }
      this.components[id] = fixed;
    }
    return relink(json) as Json;
  }
}

/** `#/$defs/X` → `#/components/schemas/X`, everywhere in a schema. */
function relink(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(relink);
  if (typeof v !== 'object' || v === null) return v;
  const out: Json = {};
  for (const [k, x] of Object.entries(v)) {
    out[k] = k === '$ref' && typeof x === 'string' ? x.replace(/^#\/\$defs\//, '#/components/schemas/') : relink(x);
  }
  return out;
}

/** The members of an object schema, or of the object a pipe ends in. */
function shapeOf(schema: z.ZodType): Record<string, z.ZodType> {
  if (schema instanceof z.ZodObject) return schema.shape;
  const def = schema._zod.def as { type: string; out?: z.ZodType };
  return def.type === 'pipe' && def.out ? shapeOf(def.out) : {};
}

const ref = (kind: string, name: string) => ({ $ref: `#/components/${kind}/${name}` });

const HEADERS: Record<string, Json> = {
  'SVC-Trace-Id': { description: 'The request id: the SVC-Trace-Id sent (when valid) or a new UUID; it is in the log lines of the request', schema: { type: 'string' } },
  'RateLimit-Limit': { description: 'Points of the strictest matching rate-limit rule (sent when a rule matched)', schema: { type: 'string' } },
  'RateLimit-Remaining': { description: 'Points left in the window of that rule', schema: { type: 'string' } },
  'RateLimit-Reset': { description: 'Seconds until that window resets', schema: { type: 'string' } },
  'Retry-After': { description: 'Seconds to wait before retrying', required: true, schema: { type: 'string' } },
  Allow: { description: 'The methods the path answers', required: true, schema: { type: 'string' } },
  'SVC-PROXY-DESTINATION-STATUS': { description: "The destination's status code: present on every answer that came from the destination, absent on tokenproxy's own errors", required: true, schema: { type: 'string' } },
};

/** The errors a route can answer beyond its own responses, from what the pipeline does for it. */
function commonErrors(route: Route, s: RouteSchemas | undefined): Record<number, string> {
  const e: Record<number, string> = {};
  const reads = s ? Boolean(s.body || s.query || s.params) : route.auth !== 'none';
  if (reads) e[400] = 'The request failed validation (validation_failed, invalid_json, nesting_too_deep, …)';
  if (route.auth !== 'none') {
    e[401] = route.auth === 'proxy' ? 'No or an unknown proxy key (missing_proxy_key, invalid_proxy_key), or API key' : 'No or an unknown API key (missing_api_key, invalid_api_key)';
    e[403] = 'The key lacks the permission or key kind (forbidden)';
  }
  if (route.path.includes(':')) e[404] = 'Not found (not_found)';
  if (s?.body || (!s && route.auth !== 'none')) {
    e[413] = 'The body is over the limit (body_too_large)';
    e[415] = 'The Content-Type, or a charset other than UTF-8, is not accepted here (unsupported_media_type)';
  }
  if (route.group !== 'health') e[429] = 'Rate limited (rate_limited); Retry-After says when to retry';
  if (route.auth !== 'none') e[503] = 'A store the request needs is unavailable (store_unavailable, rate_limit_unavailable)';
  return e;
}

function mediaTypes(spec: ResponseSpec, io: SchemaSet): Json | undefined {
  if (!spec.body) return undefined;
  return { [spec.contentType ?? 'application/json']: { schema: io.convert(spec.body, 'output') } };
}

function responseHeaders(route: Route, status: number, extra: ResponseSpec['headers'], set: SchemaSet): Json {
  const h: Json = { 'SVC-Trace-Id': ref('headers', 'SVC-Trace-Id') };
  if (route.group !== 'health' && route.auth !== 'none') {
    for (const n of ['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']) h[n] = ref('headers', n);
  }
  if (status === 429) h['Retry-After'] = ref('headers', 'Retry-After');
  for (const [name, x] of Object.entries(extra ?? {})) {
    h[name] = { description: x.description, required: x.required ?? false, schema: x.schema ? set.convert(x.schema, 'output') : { type: 'string' } };
  }
  return h;
}

function operation(route: Route, method: string, set: SchemaSet): Json {
  const s = route.schemas;
  const op: Json = {
    operationId: `${method}${openApiPath(route.path).replace(/[{}]/g, '').split(/[/.-]/).filter(Boolean).map((w) => w[0]!.toUpperCase() + w.slice(1)).join('')}`,
    summary: s?.summary ?? `${route.method === '*' ? 'ANY' : route.method} ${route.path}`,
    tags: [...(s?.tags ?? [route.group.split('.')[0]!])],
  };
  const description = s ? s.description : 'This route declares no schemas yet: its request and answer are described in the guides under docs/.';
  if (description) op.description = description;
  op.security = route.auth === 'api' ? [{ ApiKey: [] }]
    : route.auth === 'proxy' ? [{ ProxyKey: [] }, { ProxyKeyQuery: [] }, { ProxyKey: [], ApiKey: [] }, { ProxyKeyQuery: [], ApiKey: [] }]
    : [];
  const extras: Json = {};
  if (route.permission) extras.permission = route.permission;
  if (route.kinds) extras.key_kinds = [...route.kinds];
  if (Object.keys(extras).length) op['x-tokenproxy'] = extras;

  const parameters: Json[] = [];
  const paramShape = s?.params?.shape ?? {};
  for (const name of [...route.path.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => m[1]!)) {
    const schema = paramShape[name] as z.ZodType | undefined;
    parameters.push({ name, in: 'path', required: true, schema: schema ? set.convert(schema, 'input') : { type: 'string' } });
  }
  if (route.path.endsWith('/*')) {
    parameters.push({ name: 'path', in: 'path', required: true, description: 'The rest of the path, with its slashes, appended to the destination URL', schema: { type: 'string' } });
  }
  for (const [name, schema] of Object.entries(s?.query ? shapeOf(s.query) : {})) {
    const z4 = schema as z.ZodType;
    const p: Json = { name, in: 'query', required: !z4.safeParse(undefined).success, schema: set.convert(z4, 'input') };
    if (z4.description) p.description = z4.description;
    parameters.push(p);
  }
  for (const [name, h] of Object.entries(s?.requestHeaders ?? {})) {
    parameters.push({ name, in: 'header', required: h.required ?? false, description: h.description, schema: h.schema ? set.convert(h.schema, 'input') : { type: 'string' } });
  }
  if (route.auth === 'api' && route.idempotent) {
    parameters.push({
      name: 'SVC-IDEMPOTENCY-KEY', in: 'header', required: false,
      description: 'Makes a retry safe: the first successful answer is stored for 24 h and replayed (with SVC-IDEMPOTENT-REPLAYED: true) to the same request with the same key',
      schema: { type: 'string', minLength: 1, maxLength: 255, pattern: '^[A-Za-z0-9._:~+/=-]+$' },
    });
  }
  parameters.push(ref('parameters', 'TraceId'));
  op.parameters = parameters;
  if (s?.queryDescription) op.description = [op.description, s.queryDescription].filter(Boolean).join('\n\n');

  if (s?.body) {
    const schema = set.convert(s.body.schema, 'input');
    op.requestBody = {
      required: true,
      ...(s.body.description ? { description: s.body.description } : {}),
      content: Object.fromEntries((s.body.mediaTypes ?? ['application/json']).map((t) => [t, { schema }])),
    };
  }

  const responses: Json = {};
  for (const [status, spec] of Object.entries(s?.responses ?? {})) {
    if (!spec) continue;
    const content = mediaTypes(spec, set);
    responses[status] = { description: spec.description, headers: responseHeaders(route, Number(status), spec.headers, set), ...(content ? { content } : {}) };
  }
  const wrapped = route.wrapErrors === 'proxy_error';
  if (route.auth === 'api' && route.idempotent) {
    for (const [status, description] of [
      ['409', 'The same SVC-IDEMPOTENCY-KEY is still being served (idempotency_key_in_flight; Retry-After)'],
      ['422', 'The SVC-IDEMPOTENCY-KEY was used for another request (idempotency_key_reused)'],
    ] as const) {
      if (!responses[status]) responses[status] = { description, headers: responseHeaders(route, Number(status), undefined, set), content: { [PROBLEM_TYPE]: { schema: ref('schemas', 'Problem') } } };
    }
  }
  const errorContent = wrapped ? { 'application/json': { schema: ref('schemas', 'ProxyError') } } : { [PROBLEM_TYPE]: { schema: ref('schemas', 'Problem') } };
  for (const [status, description] of Object.entries(commonErrors(route, s))) {
    if (responses[status]) continue;
    responses[status] = { description, headers: responseHeaders(route, Number(status), undefined, set), content: errorContent };
  }
  if (!s || wrapped) {
    // The destination's answer (proxy), or the answer of a route that declares none.
    responses.default = wrapped
      ? { description: "The destination's answer, as it is after the response transforms", headers: { 'SVC-PROXY-DESTINATION-STATUS': ref('headers', 'SVC-PROXY-DESTINATION-STATUS'), 'SVC-Trace-Id': ref('headers', 'SVC-Trace-Id') }, content: { '*/*': { schema: {} } } }
      : { description: 'The answer of the route; errors are problem bodies', headers: responseHeaders(route, 200, undefined, set), content: { 'application/json': { schema: {} }, [PROBLEM_TYPE]: { schema: ref('schemas', 'Problem') } } };
  } else {
    responses.default = { description: 'Any other error (internal_error, shutting_down, …)', headers: responseHeaders(route, 500, undefined, set), content: errorContent };
  }
  op.responses = responses;
  return op;
}

export interface OpenApiInfo {
  version: string;
}

/** package.json's version (this file is src/api/ or dist/api/: the package root is two levels up). */
function packageVersion(): string {
  return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

/** The document for `routes` (plain JSON, made once). */
export function openApiDocument(routes: readonly Route[], info: OpenApiInfo): Json {
  const set = new SchemaSet();
  set.convert(Problem, 'output');
  set.convert(ProxyError, 'output');
  const paths: Record<string, Json> = {};
  for (const route of routes) {
    const item = (paths[openApiPath(route.path)] ??= {});
    for (const m of openApiMethods(route.method)) item[m] = operation(route, m, set);
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'tokenproxy',
      version: info.version,
      description: [
        'Self-hosted tokenization vault and reverse proxy.',
        'Every error is an RFC 9457 problem body (application/problem+json) with a stable `code`; on `/proxy/*` it comes wrapped as `{"proxy_error": problem}` (application/json) so it cannot be mistaken for the destination\'s answer.',
        'A path that does not exist answers 404 `route_not_found`; a method a path does not have answers 405 `method_not_allowed` with `Allow`. HEAD is answered on every GET route.',
        'Rate-limited routes send `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` when a rule matched, and `Retry-After` on a 429.',
      ].join('\n\n'),
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    paths,
    components: {
      schemas: set.components,
      securitySchemes: {
        ApiKey: { type: 'apiKey', in: 'header', name: 'SVC-API-KEY', description: 'An application key (private, public or management)' },
        ProxyKey: { type: 'apiKey', in: 'header', name: 'SVC-PROXY-KEY', description: "A proxy's key; with the proxy's require_auth, an API key with proxy:invoke in the same tenant as well" },
        ProxyKeyQuery: { type: 'apiKey', in: 'query', name: 'svc-proxy-key', description: 'The proxy key as a query parameter (removed before forwarding)' },
      },
      headers: HEADERS,
      parameters: {
        TraceId: {
          name: 'SVC-Trace-Id', in: 'header', required: false,
          description: 'A request id of yours (1 to 128 of A-Z a-z 0-9 . _ : -), echoed and logged; a new UUID when absent or invalid',
          schema: { type: 'string' },
        },
      },
    },
  };
}

/** GET /openapi.json. `routes` is called once, on the first request (the list includes this route). */
export function openApiRoutes(routes: () => readonly Route[], info: OpenApiInfo = { version: packageVersion() }): Route[] {
  let doc: Json | undefined;
  return [
    {
      method: 'GET', path: '/openapi.json', group: 'health', auth: 'none', body: 'none',
      schemas: {
        summary: 'This document',
        tags: ['health'],
        responses: { 200: { description: 'The OpenAPI 3.1 document of the service', body: z.record(z.string(), z.unknown()) } },
      },
      handle: async (ctx) => sendJson(ctx.res, 200, (doc ??= openApiDocument(routes(), info)), ctx.headers),
    },
  ];
}
