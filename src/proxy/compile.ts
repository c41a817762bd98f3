/**
 * Proxies compiled once at start-up, in one pass: JSON pointers parsed (json-ptr),
 * regexes and expressions compiled, code transforms turned into reactor-runtime definitions, the
 * destination split into a fixed origin and base path. `compileProxy` returns the compiled proxy
 * or every problem by config path, so a bad pointer or regex stops start-up with a message instead
 * of failing requests. A compiled proxy holds no config object.
 */
import { JsonPointer } from 'json-ptr';
import { transformLimits } from '../config/limits.js';
import type { ProxyConfig } from '../config/schema.js';
import { computeFingerprintScope, computeSearchScope } from '../auth/access.js';
import type { Principal } from '../auth/keys.js';
import type { AccessRule, Application, ProxySummary, ProxyTransformView, Tenant } from '../auth/tenancy.js';
import { compiledOr, type Compiled, type Problem } from '../problems.js';
import type { ReactorDefinition } from '../reactors/runtime.js';
import { isIdExpression, parseAlias } from '../vault/alias.js';
import { definitionTemplate, type DefinitionTemplate } from '../vault/definition.js';
import { checkDataExpression, compileExpression, ExpressionError } from '../vault/expressions.js';
import { parseDestination, type DestinationBase } from './destination.js';

/** Segments that would reach an object's prototype (rejected at config load). */
const FORBIDDEN_SEGMENTS = new Set(['__proto__', 'constructor', 'prototype']);
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

export interface CompiledField {
  /** The pointer's decoded segments. */
  segments: string[];
  /** `card.number`-style path for error messages. */
  label: string;
  /** The token each value becomes, without its data (config types stop at the compiler). */
  token: DefinitionTemplate;
}

export type RequestStep =
  | { kind: 'tokenize'; identifier: string | undefined; fields: CompiledField[] }
  | { kind: 'code'; key: string }
  | { kind: 'detokenize' };

export type ResponseStep =
  | { kind: 'code'; key: string }
  | { kind: 'mask'; regex: RegExp; character: string }
  | { kind: 'append_json'; pointer: JsonPointer; value: string }
  | { kind: 'append_header'; name: string; value: string };

export interface CompiledProxy {
  tenant: Tenant;
  /** Its settings (id, timeout, leak guard, …) as the management routes show them. */
  settings: ProxySummary;
  destination: DestinationBase;
  request: RequestStep[];
  response: ResponseStep[];
  /** Creates the tokens of tokenize transforms: the proxy itself, in its tenant. */
  principal: Principal;
  /**
   * The path its requests take, chosen here, not per request. `buffered`: the body is
   * read before forwarding (a request transform, or the leak guard blocks); else it streams.
   */
  buffered: boolean;
  /** The answer goes through response transforms (read, then transformed); else it streams back. */
  transformsAnswer: boolean;
  /** A WebSocket upgrade may pass: nothing to transform or block (upgrade.ts). */
  upgradable: boolean;
  /** Has a `detokenize` request transform (docs/detokenization.md "Outbound proxy"). */
  detokenizes: boolean;
  /** Its code transforms, for the reactor host. */
  definitions: readonly ReactorDefinition[];
}

/** The reactor-runtime key of a proxy's code transform. */
export function transformKey(tenantId: string, proxyId: string, phase: 'request' | 'response', index: number): string {
  return `${tenantId}/proxy/${proxyId}/${phase}/${index}`;
}

function pointerSegments(pointer: string): string[] {
  const segments = JsonPointer.create(pointer).path.map(String);
  const bad = segments.find((s) => FORBIDDEN_SEGMENTS.has(s));
  if (bad !== undefined) throw new Error(`the segment "${bad}" is not allowed`);
  return segments;
}

function hasCaptureGroup(regex: RegExp): boolean {
  return (new RegExp(`${regex.source}|`).exec('')?.length ?? 0) > 1;
}

/**
 * A URL without credentials, query or fragment (each may hold a secret; the fragment is never
 * sent to the destination, so showing it serves nothing): what the management
 * routes show.
 */
function safeUrl(raw: string): string {
  const u = new URL(raw);
  u.username = '';
  u.password = '';
  u.search = '';
  u.hash = '';
  return u.toString();
}

/**
 * A transform as the management routes show it: no
 * code, code file path or appended value, any of which may hold a secret or a host path.
 */
function transformView(tr: ProxyConfig['request_transforms'][number] | ProxyConfig['response_transforms'][number]): ProxyTransformView {
  switch (tr.type) {
    case 'tokenize':
      return Object.freeze(tr.identifier === undefined ? { type: tr.type } : { type: tr.type, options: Object.freeze({ identifier: tr.identifier }) });
    case 'mask':
      return Object.freeze({ type: tr.type, matcher: 'regex', expression: tr.pattern, replacement: tr.character });
    case 'append_json':
      return Object.freeze({ type: tr.type, options: Object.freeze({ location: tr.location }) });
    case 'append_header':
      return Object.freeze({ type: tr.type, options: Object.freeze({ location: tr.name }) });
    default:
      return Object.freeze({ type: tr.type });
  }
}

/** The segments of a pointer that must point below the root, or the problem (prefixed with `at`). */
function belowRoot(pointer: string, at: string, example: string, problems: Problem[]): string[] {
  try {
    const segments = pointerSegments(pointer);
    if (segments.length === 0) problems.push(`${at}: must point below the root${example}`);
    return segments;
  } catch (err) {
    problems.push(`${at}: not a valid JSON pointer (${(err as Error).message})`);
    return [];
  }
}

function tokenizeStep(tr: Extract<ProxyConfig['request_transforms'][number], { type: 'tokenize' }>, at: string, problems: Problem[]): RequestStep {
  const fields = tr.fields.map((f, fi): CompiledField => {
    const here = `${at}.fields[${fi}]`;
    const segments = belowRoot(f.pointer, `${here}.pointer`, ' (e.g. "/card")', problems);
    // The same rule as for any token's expressions (docs/api.md "Token definitions"): each must
    // depend on data; a constant here would pass start-up and then fail every request.
    const exprs: Array<[string, string | undefined]> = [
      ['fingerprint_expression', f.token.fingerprint_expression],
      ['mask', f.token.mask],
      ...(f.token.search_indexes ?? []).map((x, n): [string, string] => [`search_indexes[${n}]`, x]),
    ];
    for (const [name, expr] of exprs) {
      if (expr === undefined) continue;
      try {
        checkDataExpression(expr);
      } catch (err) {
        problems.push(`${here}.token.${name}: ${err instanceof ExpressionError ? err.message : 'invalid expression'}`);
      }
    }
    // Deduplication matches only tokens the caller may read; the proxy creates its tokens as
    // itself and reads none, so the flag could never match: say so instead of ignoring it.
    // An alias id is checked here, once; whether the value can have it, per request.
    if (f.token.id !== undefined) {
      const alias = isIdExpression(f.token.id) ? parseAlias(f.token.id, f.token.type) : 'a proxy creates many tokens: a fixed id would conflict; use an alias expression ({{ data | alias_card }}, …)';
      if (typeof alias === 'string') problems.push(`${here}.token.id: ${alias}`);
    }
    if (f.token.deduplicate_token) {
      problems.push(`${here}.token.deduplicate_token: not available in a proxy (deduplication only matches tokens the creator may read, and a proxy reads none)`);
    }
    return { segments, label: segments.join('.'), token: definitionTemplate(f.token) };
  });
  return { kind: 'tokenize', identifier: tr.identifier, fields };
}

function responseStep(tr: ProxyConfig['response_transforms'][number], key: string, here: string, problems: Problem[]): ResponseStep | undefined {
  if (tr.type === 'append_json' || tr.type === 'append_header') {
    try {
      compileExpression(tr.value);
    } catch (err) {
      problems.push(`${here}.value: ${err instanceof ExpressionError ? err.message : 'invalid expression'}`);
    }
  }
  switch (tr.type) {
    case 'code':
      return { kind: 'code', key };
    case 'mask':
      try {
        const regex = new RegExp(tr.pattern, 'gd');
        if (!hasCaptureGroup(regex)) problems.push(`${here}.pattern: needs a capture group: the captured text is what gets masked`);
        return { kind: 'mask', regex, character: tr.character };
      } catch {
        problems.push(`${here}.pattern: not a valid regular expression`);
        return undefined;
      }
    case 'append_json': {
      const segments = belowRoot(tr.location, `${here}.location`, '', problems);
      return segments.length > 0 ? { kind: 'append_json', pointer: JsonPointer.create(tr.location), value: tr.value } : undefined;
    }
    case 'append_header':
      if (!HEADER_NAME.test(tr.name)) problems.push(`${here}.name: not a valid header name`);
      if (/^svc-/i.test(tr.name)) problems.push(`${here}.name: SVC-* headers are reserved`);
      return { kind: 'append_header', name: tr.name.toLowerCase(), value: tr.value };
  }
}

/** What a proxy creates its tokens as: itself, in its tenant, with token:create only. */
function proxyApplication(p: ProxyConfig): Application {
  const grants = { permissions: ['token:create'] as const, rules: [] as readonly AccessRule[] };
  return Object.freeze({
    id: `proxy:${p.id}`, name: `proxy ${p.name}`, type: 'private', legacy: false, allowedOrigins: [], ...grants,
    searchScope: computeSearchScope(grants), fingerprintScope: computeFingerprintScope(grants),
  });
}

/**
 * One proxy of `tenant` compiled, or every problem in it, each prefixed with `at` (its config
 * path). `tenantName` names its code transforms for the reactor host.
 */
export function compileProxy(tenant: Tenant, p: ProxyConfig, at: string): Compiled<CompiledProxy> {
  const problems: Problem[] = [];
  const request = p.request_transforms.map((tr, i): RequestStep => {
    const here = `${at}.request_transforms[${i}]`;
    if (tr.type === 'code') return { kind: 'code', key: transformKey(tenant.id, p.id, 'request', i) };
    if (tr.type === 'tokenize') return tokenizeStep(tr, here, problems);
    // The plaintext is the calling key's to use (token:use): a proxy anyone with its key may call
    // would hand out every token of the tenant.
    if (!p.require_auth) problems.push(`${here}: a detokenize transform needs require_auth: true (the calling API key's token:use decides)`);
    // Last, so neither user code nor a tokenize step ever sees the plaintext.
    if (i !== p.request_transforms.length - 1) problems.push(`${here}: detokenize must be the last request transform`);
    return { kind: 'detokenize' };
  });
  const response = p.response_transforms.map((tr, i) =>
    responseStep(tr, transformKey(tenant.id, p.id, 'response', i), `${at}.response_transforms[${i}]`, problems));
  return compiledOr(problems, () => {
    const settings: ProxySummary = Object.freeze({
      id: p.id, name: p.name, destination_url: safeUrl(p.destination_url), require_auth: p.require_auth, timeout_ms: p.timeout_ms,
      leak_guard: p.leak_guard,
      request_transforms: Object.freeze(p.request_transforms.map(transformView)),
      response_transforms: Object.freeze(p.response_transforms.map(transformView)),
    });
    return Object.freeze({
      tenant,
      settings,
      destination: parseDestination(p.destination_url),
      request,
      response: response.filter((s): s is ResponseStep => s !== undefined),
      principal: Object.freeze({ tenant, app: proxyApplication(p), keyId: `proxy:${p.id}`, kind: tenant.test ? 'test' : 'private' }),
      buffered: request.length > 0 || p.leak_guard === 'block',
      transformsAnswer: p.response_transforms.length > 0,
      upgradable: request.length === 0 && p.response_transforms.length === 0 && p.leak_guard !== 'block',
      detokenizes: request.some((s) => s.kind === 'detokenize'),
      definitions: Object.freeze(transformDefinitions(tenant, p)),
    });
  });
}

/** The code transforms of a proxy, for the reactor runtime. */
function transformDefinitions(t: Tenant, p: ProxyConfig): ReactorDefinition[] {
  const def = (phase: 'request' | 'response', i: number, code: string): ReactorDefinition => ({
    key: transformKey(t.id, p.id, phase, i),
    name: `${t.name}/proxy/${p.id}/${phase}[${i}]`,
    code,
    configuration: { ...p.configuration },
    // A transform never outlives its proxy's timeout, nor the spec's 30 s.
    ...transformLimits(p.timeout_ms),
  });
  return [
    ...p.request_transforms.flatMap((tr, i) => (tr.type === 'code' ? [def('request', i, tr.code!)] : [])),
    ...p.response_transforms.flatMap((tr, i) => (tr.type === 'code' ? [def('response', i, tr.code!)] : [])),
  ];
}
