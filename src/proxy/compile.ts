/**
 * Proxies compiled once at start-up: JSON pointers parsed (json-ptr), regexes and
 * expressions compiled, code transforms turned into reactor-runtime definitions, the destination
 * split into a fixed origin and base path. `checkProxy` reports config problems by path, so a bad
 * pointer or regex stops start-up with a message instead of failing requests.
 */
import { JsonPointer } from 'json-ptr';
import { transformLimits } from '../config/limits.js';
import type { ApplicationConfig, ProxyConfig, TenantConfig, TokenTemplateConfig } from '../config/schema.js';
import type { Principal } from '../auth/keys.js';
import type { ReactorDefinition } from '../reactors/runtime.js';
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
  token: TokenTemplateConfig;
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
  tenant: TenantConfig;
  config: ProxyConfig;
  destination: DestinationBase;
  request: RequestStep[];
  response: ResponseStep[];
  /** Creates the tokens of tokenize transforms: the proxy itself, in its tenant. */
  principal: Principal;
  /** The body must be read before forwarding (a request transform, or the leak guard blocks). */
  buffered: boolean;
  /** Has a `detokenize` request transform (docs/detokenization.md "Outbound proxy"). */
  detokenizes: boolean;
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

/** Problems in one proxy's transforms, each prefixed with its config path. */
export function checkProxy(p: ProxyConfig, at: string): string[] {
  const problems: string[] = [];
  p.request_transforms.forEach((tr, i) => {
    if (tr.type !== 'tokenize') return;
    tr.fields.forEach((f, fi) => {
      try {
        if (pointerSegments(f.pointer).length === 0) problems.push(`${at}.request_transforms[${i}].fields[${fi}].pointer: must point below the root (e.g. "/card")`);
      } catch (err) {
        problems.push(`${at}.request_transforms[${i}].fields[${fi}].pointer: not a valid JSON pointer (${(err as Error).message})`);
      }
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
          problems.push(`${at}.request_transforms[${i}].fields[${fi}].token.${name}: ${err instanceof ExpressionError ? err.message : 'invalid expression'}`);
        }
      }
      // Deduplication matches only tokens the caller may read; the proxy creates its tokens as
      // itself and reads none, so the flag could never match: say so instead of ignoring it.
      if (f.token.deduplicate_token) {
        problems.push(`${at}.request_transforms[${i}].fields[${fi}].token.deduplicate_token: not available in a proxy (deduplication only matches tokens the creator may read, and a proxy reads none)`);
      }
    });
  });
  p.request_transforms.forEach((tr, i) => {
    if (tr.type !== 'detokenize') return;
    const here = `${at}.request_transforms[${i}]`;
    // The plaintext is the calling key's to use (token:use): a proxy anyone with its key may call
    // would hand out every token of the tenant.
    if (!p.require_auth) problems.push(`${here}: a detokenize transform needs require_auth: true (the calling API key's token:use decides)`);
    // Last, so neither user code nor a tokenize step ever sees the plaintext.
    if (i !== p.request_transforms.length - 1) problems.push(`${here}: detokenize must be the last request transform`);
  });
  p.response_transforms.forEach((tr, i) => {
    const here = `${at}.response_transforms[${i}]`;
    if (tr.type === 'mask') {
      try {
        if (!hasCaptureGroup(new RegExp(tr.pattern))) problems.push(`${here}.pattern: needs a capture group: the captured text is what gets masked`);
      } catch {
        problems.push(`${here}.pattern: not a valid regular expression`);
      }
    }
    if (tr.type === 'append_json') {
      try {
        if (pointerSegments(tr.location).length === 0) problems.push(`${here}.location: must point below the root`);
      } catch (err) {
        problems.push(`${here}.location: not a valid JSON pointer (${(err as Error).message})`);
      }
    }
    if (tr.type === 'append_header' && !HEADER_NAME.test(tr.name)) problems.push(`${here}.name: not a valid header name`);
    if (tr.type === 'append_header' && /^svc-/i.test(tr.name)) problems.push(`${here}.name: SVC-* headers are reserved`);
    if (tr.type === 'append_json' || tr.type === 'append_header') {
      try {
        compileExpression(tr.value);
      } catch (err) {
        problems.push(`${here}.value: ${err instanceof ExpressionError ? err.message : 'invalid expression'}`);
      }
    }
  });
  return problems;
}

export function compileProxy(tenant: TenantConfig, config: ProxyConfig): CompiledProxy {
  const request: RequestStep[] = config.request_transforms.map((tr, i): RequestStep =>
    tr.type === 'code'
      ? { kind: 'code', key: transformKey(tenant.id, config.id, 'request', i) }
      : tr.type === 'detokenize'
        ? { kind: 'detokenize' }
        : {
            kind: 'tokenize',
            identifier: tr.identifier,
            fields: tr.fields.map((f) => {
              const segments = pointerSegments(f.pointer);
              return { segments, label: segments.join('.'), token: f.token };
            }),
          },
  );
  const response: ResponseStep[] = config.response_transforms.map((tr, i) => {
    switch (tr.type) {
      case 'code':
        return { kind: 'code', key: transformKey(tenant.id, config.id, 'response', i) };
      case 'mask':
        return { kind: 'mask', regex: new RegExp(tr.pattern, 'gd'), character: tr.character };
      case 'append_json':
        pointerSegments(tr.location);
        return { kind: 'append_json', pointer: JsonPointer.create(tr.location), value: tr.value };
      case 'append_header':
        return { kind: 'append_header', name: tr.name.toLowerCase(), value: tr.value };
    }
  });
  const app: ApplicationConfig = {
    id: `proxy:${config.id}`,
    name: `proxy ${config.name}`,
    type: 'private',
    keys: [],
    permissions: ['token:create'],
    rules: [],
    legacy: false,
    allowed_origins: [],
  };
  return {
    tenant,
    config,
    destination: parseDestination(config.destination_url),
    request,
    response,
    principal: { tenant, app, keyId: `proxy:${config.id}`, kind: tenant.test ? 'test' : 'private' },
    buffered: request.length > 0 || config.leak_guard === 'block',
    detokenizes: request.some((s) => s.kind === 'detokenize'),
  };
}

/** The code transforms of every proxy, for the reactor runtime. */
export function proxyTransformDefinitions(tenants: readonly TenantConfig[]): ReactorDefinition[] {
  return tenants.flatMap((t) =>
    t.proxies.flatMap((p) => {
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
    }),
  );
}
