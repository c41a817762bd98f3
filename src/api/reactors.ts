/**
 * POST /reactors/{id}/react (README "Reactors"): `{"args": …}` in, `{"raw": …, "tokens": …}` out. The
 * reactor runs in the reactor host (never in this process); what it returns under `tokenize`
 * goes through the same all-or-nothing tokenize as POST /tokenize, as the caller.
 */
import type { TenantConfig } from '../config/schema.js';
import { ServiceError } from '../errors.js';
import type { Route } from '../http/context.js';
import { ReactorArgsJson } from '../http/large-json.js';
import { sendJson } from '../http/respond.js';
import type { ReactorDefinition, ReactorRuntime } from '../reactors/runtime.js';
import type { TokenService } from '../vault/service.js';

/** The runtime key of a tenant's reactor. */
export function reactorKey(tenantId: string, reactorId: string): string {
  return `${tenantId}/reactor/${reactorId}`;
}

export function reactorDefinitions(tenants: readonly TenantConfig[]): ReactorDefinition[] {
  return tenants.flatMap((t) =>
    t.reactors.map((r) => ({
      key: reactorKey(t.id, r.id),
      name: `${t.name}/${r.id}`,
      code: r.code!,
      configuration: { ...r.configuration },
      timeout_ms: r.timeout_ms,
      warm_concurrency: r.warm_concurrency,
      max_concurrency: r.max_concurrency,
      queue_limit: r.queue_limit,
      memory_limit_mb: r.memory_limit_mb,
    })),
  );
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function reactorRoutes(runtime: ReactorRuntime | null, tokens: TokenService): Route[] {
  return [
    {
      method: 'POST',
      path: '/reactors/:id/react',
      group: 'reactor',
      auth: 'api',
      permission: 'reactor:invoke',
      handle: async (ctx) => {
        const p = ctx.principal!;
        // Another tenant's reactor is as missing as an unknown one.
        if (!runtime || !p.tenant.reactors.some((r) => r.id === ctx.params.id)) {
          throw new ServiceError('not_found', { detail: 'No reactor with this id' });
        }
        const body = await ctx.readJson();
        const key = reactorKey(p.tenant.id, ctx.params.id!);
        let result: unknown;
        // A large body was checked and its args serialized in the JSON worker (src/http/large-json.ts).
        if (body instanceof ReactorArgsJson) result = await runtime.invoke(key, { argsJson: body.argsJson }, { log: ctx.log });
        else {
          if (!isObject(body)) throw new ServiceError('validation_failed', { detail: 'The body must be an object: {"args": …}' });
          result = await runtime.invoke(key, { args: body.args }, { log: ctx.log });
        }
        if (result !== undefined && !isObject(result)) {
          throw new ServiceError('reactor_invalid_output', { detail: 'A reactor must return an object {raw?, tokenize?}' });
        }
        const out = result ?? {};
        const tokensOut = out.tokenize === undefined ? null : await tokens.tokenize(p, out.tokenize);
        sendJson(ctx.res, 200, { raw: out.raw ?? null, tokens: tokensOut }, ctx.headers);
      },
    },
  ];
}
