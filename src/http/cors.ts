/**
 * Cross-origin calls from web pages, for `public` applications only: their keys are
 * meant to sit in a page. An application lists the page origins it serves in `allowed_origins`;
 * private and management applications may not (config load refuses it), so their keys never get
 * an answer a browser would let a page read.
 *
 * - A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) carries no key: it is
 *   allowed when some public application of some tenant lists the origin and may call the route
 *   (its kind and permission). The answer is 204 with the origin echoed (never `*`), the route's
 *   methods that such an application may call, the headers a page sends, and `Vary: Origin`.
 *   Preflights are not rate limited per key (they carry none) and read nothing.
 * - A real request with `Origin` is answered with `Vary: Origin`, and its key decides the rest:
 *   a valid public key whose own application lists the origin gets `Access-Control-Allow-Origin`
 *   on every answer from there on, its failures included (403 for a permission it lacks, 429, a
 *   body refused), so its page can read them; a public key from an origin not on its own
 *   application's list is refused with 403 `origin_not_allowed`, without the header. A missing
 *   or unknown key (401) and every other kind of key never get the header: otherwise a page could
 *   try keys and read which ones the service knows (a server that forwards a browser's `Origin`
 *   is still served). A request whose `Origin` is this service's own (the hosted card fields'
 *   frame, same host) needs no list.
 */
import type { IncomingMessage } from 'node:http';
import { holds } from '../auth/access.js';
import type { Application, Tenant } from '../auth/tenancy.js';
import { ServiceError } from '../errors.js';
import type { Route } from './context.js';

/** The headers a page's script may send (the preflight's Access-Control-Allow-Headers). */
export const CORS_ALLOWED_HEADERS = 'svc-api-key, content-type, svc-idempotency-key, svc-trace-id';
/** The headers of ours a page's script may read. */
const EXPOSED_HEADERS = 'svc-trace-id, svc-idempotent-replayed, ratelimit-limit, ratelimit-remaining, ratelimit-reset, retry-after';
const MAX_AGE_SECONDS = '600';

/** An application's allowed origins, compiled: exact ones, and `https://*.<domain>` suffixes. */
export class OriginList {
  private readonly exact = new Set<string>();
  /** `.example.com` for `https://*.example.com` (https only). */
  private readonly suffixes: string[] = [];

  constructor(origins: readonly string[]) {
    for (const o of origins) {
      const lower = o.toLowerCase();
      if (lower.startsWith('https://*.')) this.suffixes.push(lower.slice('https://*'.length));
      else this.exact.add(lower);
    }
  }

  get empty(): boolean {
    return this.exact.size === 0 && this.suffixes.length === 0;
  }

  /** Whether `origin` (as a browser sends it: scheme, host and port if not the default) is listed. */
  has(origin: string): boolean {
    const o = origin.toLowerCase();
    if (this.exact.has(o)) return true;
    if (!o.startsWith('https://')) return false;
    const host = o.slice('https://'.length);
    return this.suffixes.some((s) => host.endsWith(s) && host.length > s.length && !host.slice(0, -s.length).includes(':'));
  }

  /** The CSP `frame-ancestors` sources of this list. */
  sources(): string[] {
    return [...this.exact, ...this.suffixes.map((s) => `https://*${s}`)];
  }
}

/** An origin as `allowed_origins` accepts it: `http(s)://host[:port]`, or `https://*.domain.tld`. */
export const ORIGIN_PATTERN = /^(?:https?:\/\/(?:[a-z0-9-]+\.)*[a-z0-9-]+|https:\/\/\*\.(?:[a-z0-9-]+\.)+[a-z0-9-]+|https?:\/\/\[[0-9a-f:.]+\])(?::\d{1,5})?$/;

/** The applications of a tenant as the config gives them (only what this check reads). */
interface ConfiguredApplications {
  applications: ReadonlyArray<{ type: string; allowed_origins: readonly string[] }>;
}

/** The problems of `allowed_origins` in one tenant's applications (for the compile step, src/model/tenants.ts). */
export function checkAllowedOrigins(tenant: ConfiguredApplications, where: string): string[] {
  const problems: string[] = [];
  tenant.applications.forEach((app, ai) => {
    if (app.allowed_origins.length === 0) return;
    const at = `${where}.applications[${ai}].allowed_origins`;
    if (app.type !== 'public') {
      problems.push(`${at}: only public applications may list origins (a ${app.type} key must never be in a web page)`);
    }
    app.allowed_origins.forEach((o, oi) => {
      if (!ORIGIN_PATTERN.test(o.toLowerCase())) {
        problems.push(`${at}[${oi}]: not an origin: write scheme://host[:port] without a path (e.g. https://shop.example), or https://*.example.com`);
      }
    });
  });
  return problems;
}

interface PublicApp {
  app: Application;
  origins: OriginList;
}

/** Every tenant's public applications with origins, and the preflight and header decisions. */
export class CorsPolicy {
  private readonly apps: PublicApp[] = [];
  private readonly byApp = new Map<Application, OriginList>();

  constructor(tenants: readonly Tenant[]) {
    for (const t of tenants) {
      for (const app of t.applications) {
        if (app.type !== 'public' || app.allowedOrigins.length === 0) continue;
        const origins = new OriginList(app.allowedOrigins);
        this.apps.push({ app, origins });
        this.byApp.set(app, origins);
      }
    }
  }

  get enabled(): boolean {
    return this.apps.length > 0;
  }

  /** Whether some public application listing `origin` may call `route`. */
  routeAllows(origin: string, route: Route): boolean {
    if (route.auth !== 'api') return false;
    return this.apps.some((p) => mayCall(p.app, route) && p.origins.has(origin));
  }

  /** The origins of an application (empty for a non-public one). */
  originsOf(app: Application): OriginList | undefined {
    return this.byApp.get(app);
  }
}

function mayCall(app: Application, route: Route): boolean {
  if (route.kinds && !route.kinds.includes('public')) return false;
  return !route.permission || holds(app, route.permission);
}

/** The request's Origin when it is a cross-origin one (not this service's own host), else undefined. */
export function crossOrigin(req: IncomingMessage): string | undefined {
  const origin = req.headers.origin;
  if (typeof origin !== 'string' || origin === '' || origin === 'null') return origin === 'null' ? origin : undefined;
  const host = req.headers.host;
  if (host !== undefined) {
    const i = origin.indexOf('://');
    if (i !== -1 && origin.slice(i + 3).toLowerCase() === host.toLowerCase()) return undefined;
  }
  return origin;
}

/** The answer headers that let the page at `origin` read an answer. */
export function allowOriginHeaders(origin: string): Record<string, string> {
  return { 'access-control-allow-origin': origin, vary: 'Origin', 'access-control-expose-headers': EXPOSED_HEADERS };
}

/** A preflight's answer headers, for the methods at the path that the origin's applications may call. */
export function preflightHeaders(origin: string, methods: string[]): Record<string, string> {
  return {
    ...allowOriginHeaders(origin),
    'access-control-allow-methods': methods.join(', '),
    'access-control-allow-headers': CORS_ALLOWED_HEADERS,
    'access-control-max-age': MAX_AGE_SECONDS,
  };
}

export function originRefused(): ServiceError {
  return new ServiceError('origin_not_allowed', {
    detail: "The page's origin is not in this key's application allowed_origins",
  });
}
