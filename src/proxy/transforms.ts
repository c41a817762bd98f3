/**
 * Running a proxy's transforms (docs/proxy.md): request transforms in list
 * order before forwarding, response transforms in list order on a 2xx. Tokenize steps only
 * prepare their tokens; the proxy commits every prepared token of a request in one write after
 * the last request transform, so a request that fails anywhere creates no token.
 */
import { addFieldError, ServiceError, type FieldErrors } from '../errors.js';
import type { Logger } from '../log.js';
import type { ReactorRuntime, TransformArgs } from '../reactors/runtime.js';
import { parseDefinition, type Definition } from '../vault/definition.js';
import { ExpressionError, renderInScope } from '../vault/expressions.js';
import type { Prepared, TokenService } from '../vault/service.js';
import type { FormEdit, ProxyBody } from './body.js';
import type { CompiledField, CompiledProxy, ResponseStep } from './compile.js';
import { detokenizeParts, type UseTokens } from './detokenize-request.js';
import { cleanTransformHeaders } from './headers.js';

export interface TransformContext {
  method: string;
  /** The path below the proxy, as the caller sent it (e.g. `/payments`). */
  path: string;
  query: Record<string, string | string[]>;
  log: Logger;
  /** For a `detokenize` step: the raw query to forward, and the calling key's token:use. */
  detokenize?: { rawQuery: string; use: UseTokens };
}

/** What the request transforms leave behind for the forwarder and the response transforms. */
export interface RequestOutcome {
  headers: Record<string, string | string[]>;
  /** Prepared (not yet written) tokens of every tokenize step. */
  prepared: Prepared[];
  /** `{ <identifier>: {<pointer path>: {id, type}} }` for response expressions. */
  tokens: Record<string, unknown>;
  /** Set by a `detokenize` step: the query to forward in place of the caller's. */
  query?: string;
  /** Set by a `detokenize` step: the body before it, which is what the leak guard checks. */
  beforeDetokenize?: Buffer;
  /** Set by a `detokenize` step: the headers before it, which are what the leak guard checks. */
  headersBeforeDetokenize?: Record<string, string | string[]>;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Own properties only: a pointer never walks into a prototype. */
function lookup(root: unknown, segments: readonly string[]): { parent: Record<string, unknown> | unknown[]; key: string; value: unknown } | undefined {
  let node: unknown = root;
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i]!;
    if (Array.isArray(node)) {
      if (!/^(0|[1-9][0-9]*)$/.test(seg) || Number(seg) >= node.length) return undefined;
      if (i === segments.length - 1) return { parent: node, key: seg, value: node[Number(seg)] };
      node = node[Number(seg)];
    } else if (isObject(node)) {
      if (!Object.prototype.hasOwnProperty.call(node, seg)) return undefined;
      if (i === segments.length - 1) return { parent: node, key: seg, value: node[seg] };
      node = node[seg];
    } else return undefined;
  }
  return undefined;
}

function setIn(tree: Record<string, unknown>, segments: readonly string[], value: unknown): void {
  let node = tree;
  for (const seg of segments.slice(0, -1)) {
    const next = node[seg];
    node = isObject(next) ? next : (node[seg] = {}) as Record<string, unknown>;
  }
  node[segments[segments.length - 1]!] = value;
}

function definitionFor(field: CompiledField, data: unknown, errors: FieldErrors, now: number): Definition | null {
  return parseDefinition({ ...field.token, data }, field.label, errors, now);
}

interface Found {
  field: CompiledField;
  def: Definition;
  replace: (id: string) => void;
}

interface Collected {
  found: Found[];
  /** Call once every `replace` is done: writes the new values into the body. */
  done: () => void;
}

function tooMany(max: number): ServiceError {
  return new ServiceError('too_many_tokens', {
    detail: `At most ${max} tokens can be created in one request (max_tokens_per_request); nothing was forwarded`,
  });
}

/**
 * The values at the step's pointers, validated as token definitions (400 naming every bad one).
 * More than `budget` values is 400 too_many_tokens, found before any is validated.
 */
async function collect(fields: readonly CompiledField[], body: ProxyBody, now: number, budget: number, max: number): Promise<Collected> {
  const errors: FieldErrors = {};
  const found: Found[] = [];
  let done = () => {};
  let notUtf8 = false;
  if (body.isEmpty) return { found, done };
  if (body.isJson) {
    const root = body.jsonValue();
    const hits = fields.flatMap((field) => {
      const hit = lookup(root, field.segments);
      return hit && hit.value !== undefined ? [{ field, hit }] : [];
    });
    if (hits.length > budget) throw tooMany(max);
    for (const { field, hit } of hits) {
      const def = definitionFor(field, hit.value, errors, now);
      if (def) {
        found.push({
          field, def, replace: (id) => {
            if (Array.isArray(hit.parent)) hit.parent[Number(hit.key)] = id;
            else hit.parent[hit.key] = id;
          },
        });
      }
    }
    if (found.length > 0) body.setJson(root);
  } else if (body.isForm) {
    // A form has one level: the pointer `/name` names a field; deeper pointers match nothing.
    const byName = new Map<string, CompiledField[]>();
    for (const field of fields) {
      if (field.segments.length !== 1) continue;
      const name = field.segments[0]!;
      byName.set(name, [...(byName.get(name) ?? []), field]);
    }
    if (byName.size === 0) return { found, done };
    // Every occurrence of a field is a token: at most `budget` of them, counted in one pass.
    const occurrences = await body.formFields(new Set(byName.keys()), budget);
    if (occurrences === null) throw tooMany(max);
    const perName = new Map<string, number>();
    for (const o of occurrences) perName.set(o.name, (perName.get(o.name) ?? 0) + 1);
    if (occurrences.reduce((n, o) => n + byName.get(o.name)!.length, 0) > budget) throw tooMany(max);
    const seen = new Map<string, number>();
    const edits: FormEdit[] = [];
    for (const o of occurrences) {
      const i = seen.get(o.name) ?? 0;
      seen.set(o.name, i + 1);
      for (const field of byName.get(o.name)!) {
        const label = perName.get(o.name)! > 1 ? `${field.label}[${i}]` : field.label;
        if (o.notUtf8 !== null) {
          // Its U+FFFD in place of the bytes sent would be tokenized: the value is refused instead.
          addFieldError(errors, label, o.notUtf8);
          notUtf8 = true;
          continue;
        }
        // Form values are strings: a card field carries the card number alone.
        const data = field.token.type === 'card' ? { number: o.value } : o.value;
        const def = definitionFor({ ...field, label }, data, errors, now);
        if (def) found.push({ field, def, replace: (id) => edits.push({ ...o, value: id }) });
      }
    }
    done = () => body.replaceFormValues(edits);
  } else {
    throw new ServiceError('unsupported_media_type', {
      detail: 'This proxy tokenizes fields of application/json and application/x-www-form-urlencoded bodies only',
    });
  }
  if (Object.keys(errors).length > 0) {
    const what = notUtf8 ? 'is not UTF-8 text, or has' : 'has';
    throw new ServiceError('validation_failed', { detail: `A field to tokenize ${what} the wrong shape for its token type; nothing was forwarded`, errors });
  }
  return { found, done };
}

export class ProxyTransforms {
  constructor(
    private readonly tokens: TokenService,
    private readonly runtime: ReactorRuntime | null,
  ) {}

  async runRequest(proxy: CompiledProxy, body: ProxyBody, headers: Record<string, string | string[]>, ctx: TransformContext): Promise<RequestOutcome> {
    const outcome: RequestOutcome = { headers, prepared: [], tokens: {} };
    // The tenant's per-request token limit (as for /tokenize) counts every tokenize step together.
    const max = proxy.tenant.max_tokens_per_request;
    for (const step of proxy.request) {
      if (step.kind === 'code') {
        const result = await this.code(step.key, { body: body.forCode(), headers: outcome.headers, method: ctx.method, path: ctx.path, query: ctx.query }, ctx.log);
        body.replace(result.body);
        if (result.headers) outcome.headers = cleanTransformHeaders(result.headers);
        continue;
      }
      if (step.kind === 'detokenize') {
        // The config loader made this step the last one and required require_auth.
        if (!ctx.detokenize) throw new ServiceError('internal_error', { detail: 'The detokenize transform is not available' });
        outcome.beforeDetokenize = body.serialize();
        outcome.headersBeforeDetokenize = outcome.headers;
        const parts = await detokenizeParts(body, outcome.headers, ctx.detokenize.rawQuery, ctx.detokenize.use);
        outcome.headers = parts.headers;
        outcome.query = parts.query;
        continue;
      }
      const { found, done } = await collect(step.fields, body, Date.now(), max - outcome.prepared.length, max);
      if (found.length === 0) continue;
      const prepared = await this.tokens.prepareAll(proxy.principal, found.map((f) => f.def));
      const named: Record<string, unknown> = {};
      prepared.forEach((p, i) => {
        const id = (p.deduplicatedFrom ?? p.record).id;
        found[i]!.replace(id);
        setIn(named, found[i]!.field.segments, { id, type: p.def.type });
      });
      done();
      outcome.prepared.push(...prepared);
      if (step.identifier !== undefined) outcome.tokens[step.identifier] = named;
    }
    return outcome;
  }

  /** Runs the response transforms on a 2xx body; returns the headers to answer with. */
  async runResponse(
    proxy: CompiledProxy,
    body: ProxyBody,
    headers: Record<string, string | string[]>,
    tokens: Record<string, unknown>,
    ctx: TransformContext,
  ): Promise<Record<string, string | string[]>> {
    let out = headers;
    for (const step of proxy.response) {
      out = await this.responseStep(step, body, out, tokens, ctx);
    }
    return out;
  }

  private async responseStep(
    step: ResponseStep,
    body: ProxyBody,
    headers: Record<string, string | string[]>,
    tokens: Record<string, unknown>,
    ctx: TransformContext,
  ): Promise<Record<string, string | string[]>> {
    switch (step.kind) {
      case 'code': {
        const result = await this.code(step.key, { body: body.forCode(), headers, method: ctx.method, path: ctx.path, query: ctx.query }, ctx.log);
        body.replace(result.body);
        return result.headers ? cleanTransformHeaders(result.headers) : headers;
      }
      case 'mask': {
        if (body.isEmpty) return headers;
        body.replace(maskCaptures(body.text(), step.regex, step.character));
        return headers;
      }
      case 'append_json': {
        const root = body.isJson ? body.jsonValue() : undefined;
        if (!isObject(root) && !Array.isArray(root)) {
          ctx.log.warn({ transform: 'append_json' }, 'response body is not a JSON object or array; append_json skipped');
          return headers;
        }
        step.pointer.set(root, render(step.value, tokens), true);
        body.setJson(root);
        return headers;
      }
      case 'append_header':
        return { ...headers, [step.name]: render(step.value, tokens) };
    }
  }

  private async code(key: string, args: TransformArgs, log: Logger) {
    if (!this.runtime) throw new ServiceError('reactor_unavailable');
    return this.runtime.invoke(key, { transform: args }, { log });
  }
}

function render(expr: string, tokens: Record<string, unknown>): string {
  try {
    return renderInScope(expr, { tokens });
  } catch (err) {
    if (err instanceof ExpressionError) throw new ServiceError('internal_error', { detail: 'A response transform expression could not be evaluated' });
    throw err;
  }
}

/** Every text captured by a group of `regex` (flags `gd`) replaced by `character`, length kept. */
export function maskCaptures(text: string, regex: RegExp, character: string): string {
  let out = '';
  let last = 0;
  for (const m of text.matchAll(regex)) {
    const indices = m.indices;
    if (!indices) continue;
    for (let g = 1; g < indices.length; g++) {
      const span = indices[g];
      if (!span || span[0] < last) continue;
      out += text.slice(last, span[0]) + character.repeat(span[1] - span[0]);
      last = span[1];
    }
  }
  return out + text.slice(last);
}
