/**
 * Helpers for the inbound proxy suites: a base config with proxies added to tenant A (and B), and
 * the shape checks every proxy test repeats (a problem wrapped as `{"proxy_error": {…}}`).
 */
import { baseConfig } from './service.js';

export const PROXY_KEY = 'proxy_key_aaaa_0123456789abcdef';
export const PROXY_KEY_2 = 'proxy_key_aaaa_fedcba9876543210';
export const PROXY_KEY_3 = 'proxy_key_aaaa_00112233445566778';
export const PROXY_KEY_B = 'proxy_key_bbbb_0123456789abcdef';

/** Test data: a Luhn-valid Visa test number, a cvc and an SSN. */
export const CARD = '4242424242424242';
export const CVC = '987';
export const SSN = '123-45-6789';

/** baseConfig() with `a` as tenant A's proxies and `b` as tenant B's; `server` merged in. */
export function configWithProxies(a: object[], b: object[] = [], server: Record<string, unknown> = {}): Record<string, any> {
  const cfg = baseConfig() as Record<string, any>;
  cfg.tenants[0].proxies = a;
  cfg.tenants[1].proxies = b;
  cfg.server = { ...cfg.server, ...server };
  return cfg;
}

interface Tap {
  equal(...args: any[]): unknown;
  match(...args: any[]): unknown;
}

/** Asserts a response is tokenproxy's own error, wrapped: `{"proxy_error": {status, code, …}}`. */
export function assertProxyError(t: Tap, r: { status: number; body?: any; json?: any; text: string }, status: number, code: string, msg = ''): void {
  // rawRequest answers carry the parsed body in `json` (its `body` is the Buffer); call() in `body`.
  const body = 'json' in r ? r.json : r.body;
  t.equal(r.status, status, `${msg} status ${status}: ${r.text.slice(0, 300)}`);
  t.match(body, { proxy_error: { status, code, type: `urn:tokenproxy:problem:${code}`, title: String } }, `${msg} wrapped ${code}`);
}
