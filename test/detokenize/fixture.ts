/**
 * One service for the detokenization tests of issue 23: tenant A with a recording upstream on its
 * outbound allow-list, a pre-configured proxy whose last request transform is `detokenize`, a
 * reactor that answers the same whatever it gets, and these keys:
 * - USE_ONLY: token:use (proxy:invoke, reactor:invoke) and no token:read: may send, not learn;
 * - REVEAL_USE: token:use and token:read with reveal everywhere;
 * - KEYS.masked (baseConfig): token:read with mask; KEYS.private: token:read with reveal.
 * Each test file starts its own service (its own data directory).
 */
import { baseConfig, call, KEYS, startTestService, type TestService } from '../helpers/service.js';
import { PROXY_KEY } from '../helpers/proxy.js';
import { startUpstream, type Upstream } from '../helpers/upstream.js';

export const USE_ONLY = 'test_useonly_key_hhhhhhhhhhhhhhhhhh';
export const REVEAL_USE = 'test_revealuse_key_iiiiiiiiiiiiiiii';
export { KEYS, PROXY_KEY };

const ALL = ['token:create', 'token:read', 'token:update', 'token:delete', 'token:search', 'token:use', 'proxy:invoke', 'reactor:invoke'];

interface Tap {
  teardown(fn: () => unknown): void;
}

export interface Fixture {
  s: TestService;
  up: Upstream;
  /** A new card token (number and cvc) made by a reveal key; its id. */
  card(number: string, cvc: string): Promise<string>;
  /** A new `token` whose data is the string given; its id. */
  text(data: string): Promise<string>;
}

export async function startFixture(t: Tap): Promise<Fixture> {
  const up = await startUpstream(t);
  // Always the same answer: whatever differs between two requests is the service's own doing.
  up.respond((_r, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"sent":true}');
  });
  const cfg = baseConfig() as Record<string, any>;
  const a = cfg.tenants[0];
  a.applications.push(
    { id: 'aaaaaaaa-0000-4000-8000-0000000000b1', name: 'use-only', type: 'private', keys: [USE_ONLY], permissions: ['token:use', 'proxy:invoke', 'reactor:invoke'] },
    { id: 'aaaaaaaa-0000-4000-8000-0000000000b2', name: 'reveal-use', type: 'private', keys: [REVEAL_USE], permissions: ALL,
      rules: [{ priority: 1, container: '/', transform: 'reveal', permissions: ALL }] },
  );
  a.outbound = { allowed_destinations: [up.url] };
  a.proxies = [{ id: 'pay', name: 'pay', key: PROXY_KEY, destination_url: `${up.url}/base`, require_auth: true, request_transforms: [{ type: 'detokenize' }] }];
  a.reactors = [{ id: 'ok', name: 'ok', code: 'module.exports = async function () { return { raw: { ok: true } }; };' }];
  const s = await startTestService(t, { config: cfg });
  const made = async (body: unknown) => {
    const r = await call(s.url, 'POST', '/tokens', { key: REVEAL_USE, body });
    if (r.status !== 201) throw new Error(`token not created: ${r.status} ${r.text}`);
    return r.body.id as string;
  };
  return {
    s,
    up,
    card: (number, cvc) => made({ type: 'card', data: { number, expiration_month: 7, expiration_year: 2031, cvc } }),
    text: (data) => made({ type: 'token', data }),
  };
}

export type Answer = { status: number; headers: Headers; body: any; text: string };

/** Headers that differ between any two requests (time, ids, rate-limit counters). */
const VOLATILE = /^(date|svc-trace-id|x-request-id|ratelimit.*|x-ratelimit.*|retry-after|svc-idempotent.*)$/i;

/** Everything a caller observes of an answer but its body, which only the destination writes. */
export function observed(r: Answer, withBody: boolean): Record<string, unknown> {
  const headers: Record<string, string> = {};
  r.headers.forEach((v, k) => {
    if (!VOLATILE.test(k)) headers[k] = v;
  });
  const problem = r.body?.proxy_error ?? r.body;
  const out: Record<string, unknown> = { status: r.status, headers };
  if (r.status >= 400) out.problem = { code: problem?.code, title: problem?.title, detail: problem?.detail, status: problem?.status, errors: problem?.errors };
  if (withBody || r.status >= 400) out.text = r.text;
  return out;
}

/** The outbound proxy to the fixture's upstream. */
export function outbound(f: Fixture, key: string, o: { body?: unknown; raw?: string; headers?: Record<string, string>; path?: string } = {}): Promise<Answer> {
  return call(f.s.url, 'POST', o.path ?? '/proxy/charge', { key, body: o.body, raw: o.raw, headers: { 'svc-proxy-url': f.up.url, ...(o.headers ?? {}) } });
}

/** The pre-configured proxy `pay`, whose last request transform is `detokenize`. */
export function transform(f: Fixture, key: string, o: { body?: unknown; raw?: string; headers?: Record<string, string>; path?: string } = {}): Promise<Answer> {
  return call(f.s.url, 'POST', o.path ?? '/proxy/charge', { key, body: o.body, raw: o.raw, headers: { 'svc-proxy-key': PROXY_KEY, ...(o.headers ?? {}) } });
}

export function reactor(f: Fixture, key: string, args: unknown): Promise<Answer> {
  return call(f.s.url, 'POST', '/reactors/ok/react', { key, body: { args } });
}

export function detokenize(f: Fixture, key: string, body: unknown): Promise<Answer> {
  return call(f.s.url, 'POST', '/detokenize', { key, body });
}

/** The problem of an answer, wrapped (`{"proxy_error": …}`) or not. */
export function problemOf(r: Answer): { code?: string; detail?: string; status?: number } {
  return r.body?.proxy_error ?? r.body ?? {};
}
