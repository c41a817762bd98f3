/**
 * Checks real responses against the service's own OpenAPI document (GET /openapi.json): the status
 * is documented for the method and path, the Content-Type is one the document lists, the JSON body
 * matches the schema (ajv, JSON Schema 2020-12, the dialect of OpenAPI 3.1), and required headers
 * (Retry-After on a 429, SVC-PROXY-DESTINATION-STATUS on a destination's answer) are there.
 *
 * `checkResponses(service)` makes every `service.call` check its response and throw on a mismatch,
 * so a suite validates all the answers it already asserts on.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import type { TestService } from './service.js';

// ajv-formats is CommonJS: its default export comes wrapped once more under ESM.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as unknown as (ajv: Ajv2020) => void;

type Json = Record<string, any>;

export interface CheckedResponse {
  status: number;
  headers: Headers;
  text: string;
}

const DOC_ID = 'urn:tokenproxy:openapi';
const esc = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1');

export class OpenApiChecker {
  private readonly ajv = new Ajv2020({ strict: false, allErrors: true });
  private readonly validators = new Map<string, ValidateFunction>();
  /** Templates with fewer parameters first: /tokens/search wins over /tokens/{id}. */
  private readonly templates: Array<{ path: string; re: RegExp }>;

  constructor(readonly doc: Json) {
    addFormats(this.ajv);
    this.ajv.addSchema(doc, DOC_ID);
    this.templates = Object.keys(doc.paths as Json)
      .map((path) => ({
        path,
        params: (path.match(/\{/g) ?? []).length,
        re: new RegExp('^' + path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{path\}$/, '.*').replace(/\{[^}]+\}/g, '[^/]+') + '$'),
      }))
      .sort((a, b) => a.params - b.params);
  }

  static async load(baseUrl: string): Promise<OpenApiChecker> {
    const res = await fetch(`${baseUrl}/openapi.json`);
    if (res.status !== 200) throw new Error(`GET /openapi.json answered ${res.status}`);
    return new OpenApiChecker((await res.json()) as Json);
  }

  /** The problems of one response (empty when it matches the document). */
  problems(method: string, url: string, res: CheckedResponse): string[] {
    const pathname = new URL(url, 'http://x').pathname;
    const m = method.toLowerCase();
    const template = this.templates.find((t) => t.re.test(pathname));
    const item = template ? (this.doc.paths[template.path] as Json) : undefined;
    const opMethod = item?.[m] ? m : m === 'head' && item?.get ? 'get' : undefined;
    if (!template || !opMethod) {
      // Not a documented operation: only 404 route_not_found and 405 method_not_allowed are.
      const expected = template ? 405 : 404;
      if (res.status !== expected) return [`${method} ${pathname}: not in the document, yet answered ${res.status}`];
      return this.body(`${method} ${pathname} ${res.status}`, res, ['application/problem+json'], '#/components/schemas/Problem', m === 'head');
    }
    const base = `#/paths/${esc(template.path)}/${opMethod}/responses`;
    const responses = item![opMethod].responses as Json;
    const destination = res.headers.get('svc-proxy-destination-status') !== null;
    const key = destination && responses.default ? 'default'
      : [String(res.status), `${String(res.status)[0]}XX`, 'default'].find((k) => responses[k] !== undefined);
    const where = `${method} ${template.path} ${res.status}`;
    if (!key) return [`${where}: status not documented`];
    const spec = responses[key] as Json;
    const out: string[] = [];
    for (const [name, h] of Object.entries((spec.headers ?? {}) as Json)) {
      const header = (h.$ref ? this.resolve(h.$ref as string) : h) as Json;
      if (header.required && res.headers.get(name) === null) out.push(`${where}: header ${name} missing`);
    }
    const content = (spec.content ?? {}) as Json;
    const types = Object.keys(content);
    if (!types.length) {
      if (res.text !== '') out.push(`${where}: a body where the document has none`);
      return out;
    }
    const type = (res.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
    const chosen = types.includes(type) ? type : types.includes('*/*') ? '*/*' : undefined;
    if (!chosen) return [...out, `${where}: Content-Type ${type || '(none)'} not in ${types.join(', ')}`];
    if (chosen === '*/*') return out;
    return [...out, ...this.body(where, res, [chosen], `${base}/${esc(key)}/content/${esc(chosen)}/schema`, m === 'head')];
  }

  /** Throws when the response does not match the document. */
  assert(method: string, url: string, res: CheckedResponse): void {
    const p = this.problems(method, url, res);
    if (p.length) throw new Error(`response does not match the OpenAPI document:\n  ${p.join('\n  ')}`);
  }

  private body(where: string, res: CheckedResponse, types: string[], pointer: string, head: boolean): string[] {
    const type = (res.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
    if (!types.includes(type)) return [`${where}: Content-Type ${type || '(none)'} is not ${types.join(' or ')}`];
    if (head) return [];
    let body: unknown;
    try {
      body = JSON.parse(res.text);
    } catch {
      return [`${where}: the body is not JSON`];
    }
    let validate = this.validators.get(pointer);
    if (!validate) {
      validate = this.ajv.compile({ $ref: `${DOC_ID}${pointer}` });
      this.validators.set(pointer, validate);
    }
    if (validate(body)) return [];
    return (validate.errors ?? []).map((e) => `${where}: ${e.instancePath || '(body)'} ${e.message ?? ''}`);
  }

  private resolve(ref: string): unknown {
    return ref.slice(2).split('/').reduce<any>((o, k) => o?.[k.replace(/~1/g, '/').replace(/~0/g, '~')], this.doc);
  }
}

/** Makes every `s.call` check its response against the document; returns the checker. */
export async function checkResponses(s: TestService): Promise<OpenApiChecker> {
  const checker = await OpenApiChecker.load(s.url);
  const call = s.call.bind(s);
  s.call = async (method, path, o) => {
    const res = await call(method, path, o);
    checker.assert(method, path, res);
    return res;
  };
  return checker;
}
