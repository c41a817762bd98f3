/**
 * POST /reactors/{id}/react (docs/reactors.md): `{"args": …}` in, `{"raw": …, "tokens": …}` out. The
 * reactor runs in the reactor host (never in this process); what it returns under `tokenize`
 * goes through the same all-or-nothing tokenize as POST /tokenize, as the caller.
 */
import { ServiceError } from '../errors.js';
import type { ApiContext, Route } from '../http/context.js';
import { ReactorArgsJson } from '../http/large-json.js';
import { sendJson } from '../http/respond.js';
import { countReactorTokenize } from '../rate-limit/stage.js';
import { withholdUserText } from '../reactors/failures.js';
import type { ReactorRuntime } from '../reactors/runtime.js';
import type { ReactorSummary } from '../auth/tenancy.js';
import type { TokenService } from '../vault/service.js';
import { ExpressionScan } from '../detokenize/expressions.js';
import type { Detokenizer } from '../detokenize/service.js';
import { z } from 'zod';
import type { RouteSchemas } from '../http/route-schema.js';
import { AnyJson, problem } from './schemas.js';

const BODY_DETAIL = 'The body must be an object: {"args": …}';

export const reactSchemas: RouteSchemas = {
  summary: "Run one of the tenant's reactors",
  tags: ['reactors'],
  params: z.object({ id: z.string().describe('The reactor id') }),
  body: { schema: z.object({ args: AnyJson.describe('Passed to the reactor as `args`') }) },
  // The same answer as a large body gets from the JSON worker (src/http/json-worker.ts).
  invalid: () => new ServiceError('validation_failed', { detail: BODY_DETAIL }),
  responses: {
    200: {
      description: 'What the reactor returned under `raw`, and the tokens of what it returned under `tokenize` (null when nothing)',
      body: z.object({ raw: AnyJson, tokens: AnyJson }),
    },
    500: problem('The reactor failed (reactor_runtime_error, reactor_out_of_memory, reactor_invalid_output)'),
    503: problem('The reactor host or the reactor is unavailable (reactor_unavailable, reactor_busy), or a store'),
    504: problem('The reactor timed out (reactor_timeout)'),
  },
};

/** Every string value in a JSON value (the args as the reactor got them: what the log must not hold). */
function stringLeaves(v: unknown, out: string[] = []): string[] {
  if (typeof v === 'string') out.push(v);
  else if (Array.isArray(v)) for (const x of v) stringLeaves(x, out);
  else if (typeof v === 'object' && v !== null) for (const x of Object.values(v)) stringLeaves(x, out);
  return out;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Expressions in `args` are detokenized before the reactor runs (docs/detokenization.md "Detokenization"): the
 * caller needs token:use on every token named, and without reveal only the filters that tell
 * nothing of the value; the reactor's answer is not scanned.
 */
async function detokenizeArgs(detokenizer: Detokenizer, ctx: ApiContext, args: unknown): Promise<{ args: unknown; used: boolean; revealsAll: boolean }> {
  const scan = new ExpressionScan().json(args);
  if (scan.ids.length === 0) return { args: scan.renderSync({ tokens: new Map(), detailed: true }).json(args), used: false, revealsAll: true };
  const resolved = await detokenizer.resolveForUse(ctx.principal, scan, { action: 'reactor.args', requestId: ctx.requestId });
  // `detailed`: the key reads every token it named with reveal (detokenize/service.ts revealsAll).
  return { args: (await scan.render(resolved)).json(args), used: true, revealsAll: resolved.detailed };
}

const noReactor = () => new ServiceError('not_found', { detail: 'No reactor with this id' });

/**
 * A reactor call made ready to run (shared by the synchronous and the asynchronous
 * route): the body checked and its args detokenized, as the caller, before anything runs.
 */
export interface PreparedCall {
  input: { args: unknown } | { argsJson: string };
  /** The args held detokenized values: errors carry no text of the reactor's code. */
  detokenized: boolean;
  /**
   * The key may read with reveal every token the args named (always true when they named none):
   * otherwise the call computed on values the key may only use, and its `tokenize` is refused.
   */
  revealsAll: boolean;
  /** The args' string values (cut out of the withheld error's log line). */
  values: () => string[];
}

/** The tenant's reactor named by the path; 404 (as for another tenant's) when it is not there. */
export function reactorOf(runtime: ReactorRuntime | null, ctx: ApiContext): ReactorSummary {
  const reactor = runtime ? ctx.principal.tenant.reactors.find((r) => r.id === ctx.params.id) : undefined;
  if (!reactor) throw noReactor();
  return reactor;
}

export async function prepareCall(ctx: ApiContext, detokenizer: Detokenizer | undefined): Promise<PreparedCall> {
  const body = ctx.body;
  // A large body was checked and its args serialized in the JSON worker (src/http/large-json.ts).
  // Only a body that holds "{{" can hold an expression: the large path stays off this thread otherwise.
  if (body instanceof ReactorArgsJson && !(detokenizer && body.argsJson.includes('{{'))) {
    return { input: { argsJson: body.argsJson }, detokenized: false, revealsAll: true, values: () => [] };
  }
  let args: unknown;
  if (body instanceof ReactorArgsJson) args = body.argsJson === '' ? undefined : JSON.parse(body.argsJson);
  else if (!isObject(body)) throw new ServiceError('validation_failed', { detail: BODY_DETAIL });
  else args = body.args;
  let detokenized = false;
  let revealsAll = true;
  if (detokenizer) ({ args, used: detokenized, revealsAll } = await detokenizeArgs(detokenizer, ctx, args));
  const ready = args;
  return { input: { args: ready }, detokenized, revealsAll, values: () => stringLeaves(ready) };
}

/**
 * Runs a prepared call and makes its answer, `{raw, tokens}`: what the synchronous route sends and
 * the asynchronous one keeps. Throws the call's ServiceError (user text withheld, as for any call with detokenized args).
 */
export async function runCall(runtime: ReactorRuntime, tokens: TokenService, ctx: ApiContext, reactor: ReactorSummary, call: PreparedCall): Promise<{ raw: unknown; tokens: unknown }> {
  let result: unknown;
  try {
    result = 'argsJson' in call.input
      ? await runtime.invoke(reactor.key, { argsJson: call.input.argsJson }, { log: ctx.log })
      : await runtime.invoke(reactor.key, { args: call.input.args }, { log: ctx.log });
  } catch (err) {
    // args that held detokenized values get no text of the reactor's code back
    // (whatever the caller's read rights: one rule, and no store read on a failing call).
    if (err instanceof ServiceError && call.detokenized) throw withholdUserText(err, ctx.log, reactor.key, call.values());
    throw err;
  }
  if (result !== undefined && !isObject(result)) {
    throw new ServiceError('reactor_invalid_output', { detail: 'A reactor must return an object {raw?, tokenize?}' });
  }
  const out = result ?? {};
  // What the reactor tokenizes counts on the caller's creating rules, as /tokenize.
  if (out.tokenize !== undefined) await countReactorTokenize(ctx);
  // Args detokenized from tokens the key may only use make everything the reactor returns
  // computed from them: access.templatePolicy decides what may be tokenized (nothing, then).
  const origin = call.detokenized && !call.revealsAll ? 'use-only' : 'clear';
  const tokensOut = out.tokenize === undefined ? null : await tokens.tokenize(ctx.principal, out.tokenize, origin);
  return { raw: out.raw ?? null, tokens: tokensOut };
}

export function reactorRoutes(runtime: ReactorRuntime | null, tokens: TokenService, detokenizer?: Detokenizer): Route[] {
  return [
    {
      method: 'POST',
      path: '/reactors/:id/react',
      group: 'reactor',
      auth: 'api',
      body: 'json-args',
      permission: 'reactor:invoke',
      schemas: reactSchemas,
      // Before the body is read: another tenant's reactor is as missing as an unknown one.
      check: (ctx) => {
        reactorOf(runtime, ctx);
      },
      handle: async (ctx) => {
        // Another tenant's reactor is as missing as an unknown one (the check stage said so already).
        const reactor = reactorOf(runtime, ctx);
        const call = await prepareCall(ctx, detokenizer);
        sendJson(ctx.res, 200, await runCall(runtime!, tokens, ctx, reactor, call), ctx.headers);
      },
    },
  ];
}
