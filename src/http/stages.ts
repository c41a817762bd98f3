/**
 * The one stage list, run by both entries (pipeline.ts: the HTTP request and the
 * upgrade request):
 *
 *   route → identify → authenticate → rate limit → input → idempotency → body → handler
 *
 * `route` and `identify` are the entries' own (the router's match; the request id, its logger and
 * the headers every answer carries). The others are small named functions below; which of them a
 * route runs is decided once, when the routes are built (compileRoute), from what the route
 * declares (context.ts): its auth kind, its group (health is not rate limited), its schemas, its
 * body mode, `idempotent`. A request allocates nothing for a stage its route does not have.
 * Cheap rejections come first: no body is read before authentication and rate limiting pass.
 */
import type { Duplex } from 'node:stream';
import { holds } from '../auth/access.js';
import type { KeyIndex } from '../auth/keys.js';
import { ServiceError } from '../errors.js';
import { JSON_MEDIA_TYPES, isJsonType, parseJson, readJsonBytes, type LargeBodyMode } from './body.js';
import type { ApiContext, ApiRoute, BodyMode, Context, InboundScope, ProxyContext, ProxyRoute, RequestScope, Route } from './context.js';
import type { CorsPolicy } from './cors.js';
import { allowOriginHeaders, originRefused } from './cors.js';
import { idempotencyKeyOf, type BodyReader, type Idempotency } from './idempotency.js';
import { sendJson } from './respond.js';
import { parseBody, parseInput, queryObject } from './route-schema.js';

export interface RateLimitGate {
  /** Resolves with headers for the response, or throws ServiceError (429 / 503). */
  check(ctx: RequestScope, route: Pick<Route, 'group'>): Promise<Record<string, string>>;
}

export interface StageOptions {
  keys: KeyIndex;
  bodyLimit: number;
  maxDepth: number;
  rateLimits?: RateLimitGate;
  /** Which page origins may read answers (public applications' allowed_origins, cors.ts). */
  cors?: CorsPolicy;
  /** The idempotency stage of the routes that declare `idempotent` (absent: the header is not honoured). */
  idempotency?: Idempotency;
}

/** A route with its stages chosen: `run` takes a request from authenticate to the handler's answer. */
export interface CompiledRoute {
  readonly route: Route;
  /** `origin`: the request's cross-origin Origin (cors.ts), checked against the key's application. */
  run(ctx: Context, origin: string | undefined): Promise<void>;
}

/** An upgrade route with its stages: authenticate (proxy key only), rate limit, then the route's `upgrade`. */
export interface CompiledUpgrade {
  readonly route: ProxyRoute;
  run(ctx: RequestScope, socket: Duplex, head: Buffer): Promise<void>;
}

type Input = (ctx: Context) => void;

export function compileRoute(route: Route, o: StageOptions): CompiledRoute {
  const gate = rateLimitStage(route, o);
  const input = inputStage(route);
  switch (route.auth) {
    case 'api':
      return { route, run: apiRun(route, o, gate, input, bodyStage(route, o)) };
    case 'proxy':
      return {
        route,
        run: async (ctx) => {
          authenticateProxy(o, ctx, true);
          if (gate) addHeaders(ctx, await gate.check(ctx, route));
          if (input) input(ctx);
          await route.handle(ctx);
        },
      };
    case 'none':
      return {
        route,
        run: async (ctx) => {
          if (gate) addHeaders(ctx, await gate.check(ctx, route));
          if (input) input(ctx);
          await route.handle(ctx);
        },
      };
  }
}

export function compileUpgrade(route: ProxyRoute & Required<Pick<ProxyRoute, 'upgrade'>>, o: StageOptions): CompiledUpgrade {
  const gate = rateLimitStage(route, o);
  return {
    route,
    run: async (ctx, socket, head) => {
      // SVC-PROXY-URL is not considered: the outbound proxy takes no upgrades.
      authenticateProxy(o, ctx, false);
      if (gate) addHeaders(ctx, await gate.check(ctx, route));
      route.upgrade(ctx, socket, head);
    },
  };
}

function apiRun(route: ApiRoute, o: StageOptions, gate: RateLimitGate | undefined, input: Input | undefined, body: BodyReader | undefined): CompiledRoute['run'] {
  const idempotency = route.idempotent ? o.idempotency : undefined;
  return async (ctx, origin) => {
    identifyApiKey(o, ctx);
    // Before the key's kind and permission: a page reads its own public key's 403 and 429 (cors.ts).
    if (origin !== undefined) checkOrigin(o, ctx, origin);
    authorize(ctx, route);
    if (gate) addHeaders(ctx, await gate.check(ctx, route));
    if (input) input(ctx);
    if (route.check) route.check(ctx);
    if (idempotency) {
      const key = idempotencyKeyOf(ctx);
      if (key !== undefined) return idempotency.answer(ctx, route, key, body ?? NO_BODY);
    }
    if (body) {
      const parsed = body.parse(ctx, await body.read(ctx));
      ctx.body = parsed instanceof Promise ? await parsed : parsed;
    }
    const answer = await route.handle(ctx);
    if (answer) sendJson(ctx.res, answer.status, answer.json, ctx.headers);
  };
}

const NO_BODY: BodyReader = { read: () => Promise.resolve(Buffer.alloc(0)), parse: () => undefined };

/**
 * Counts the request on the rate limits (not health's routes, which no rule names): the gate, or
 * undefined when the route has none. The entries await its check in their own frame (no async
 * wrapper a request) and add its headers with addHeaders.
 */
function rateLimitStage(route: Route, o: StageOptions): RateLimitGate | undefined {
  return !o.rateLimits || route.group === 'health' ? undefined : o.rateLimits;
}

function addHeaders(ctx: RequestScope, headers: Record<string, string>): void {
  for (const name in headers) ctx.headers[name] = headers[name]!;
}

/** Path parameters and the query, checked by the route's schemas (route-schema.ts). */
function inputStage(route: Route): Input | undefined {
  const schemas = route.schemas;
  const params = schemas?.params;
  const query = schemas?.query;
  if (!schemas || (!params && !query)) return undefined;
  return (ctx) => {
    if (params) ctx.params = parseInput(schemas, 'params', params, ctx.params) as Record<string, string>;
    if (query) ctx.query = parseInput(schemas, 'query', query, queryObject(ctx.url.searchParams)) as Record<string, unknown>;
  };
}

const LARGE: Record<Exclude<BodyMode, 'none' | 'stream'>, LargeBodyMode> = { json: 'small', 'json-walked': 'walked', 'json-args': 'args' };

/**
 * The JSON body of a route whose body mode is a JSON one: media type (the route's
 * `schemas.body.mediaTypes`, else JSON: 415 names them), limit (413), depth (400), JSON (400),
 * then the route's body schema.
 */
function bodyStage(route: ApiRoute, o: StageOptions): BodyReader | undefined {
  if (route.body === 'none' || route.body === 'stream') return undefined;
  const large = LARGE[route.body];
  const schemas = route.schemas;
  const listed = schemas?.body?.mediaTypes;
  const accepted = listed ?? JSON_MEDIA_TYPES;
  const accept = listed ? (type: string) => listed.includes(type) : isJsonType;
  const { bodyLimit, maxDepth } = o;
  return {
    read: (ctx) => readJsonBytes(ctx.req, bodyLimit, accept, accepted),
    parse: (_ctx, raw) => {
      const parsed = parseJson(raw, maxDepth, large);
      return parsed instanceof Promise ? parsed.then((b: unknown) => parseBody(schemas, b)) : parseBody(schemas, parsed);
    },
  };
}

/** SVC-API-KEY, then the route's key kinds and permission. */
function authenticateApi(o: StageOptions, ctx: RequestScope, route: Pick<Route, 'kinds' | 'permission'>): asserts ctx is RequestScope & ApiContext {
  identifyApiKey(o, ctx);
  authorize(ctx, route);
}

/** SVC-API-KEY: 401 when it is missing or no key of this service. */
function identifyApiKey(o: StageOptions, ctx: RequestScope): asserts ctx is RequestScope & ApiContext {
  const key = headerValue(ctx.req.headers['svc-api-key']);
  if (!key) throw new ServiceError('missing_api_key', { detail: 'Send the API key in the SVC-API-KEY header' });
  const principal = o.keys.findApiKey(key);
  if (!principal) throw new ServiceError('invalid_api_key');
  ctx.principal = principal;
}

/** The route's key kinds and permission: 403. */
function authorize(ctx: ApiContext, route: Pick<Route, 'kinds' | 'permission'>): void {
  const principal = ctx.principal;
  if (route.kinds && !route.kinds.includes(principal.app.type)) {
    throw new ServiceError('forbidden', { detail: `This route needs a ${route.kinds.join(' or ')} key` });
  }
  if (route.permission && !holds(principal.app, route.permission)) {
    throw new ServiceError('forbidden', { detail: `The key lacks the permission ${route.permission}` });
  }
}

/**
 * After a key was found on a request from another origin: a public key only from its
 * application's allowed_origins, and then its answers carry the headers that let the page read
 * them (else 403, without them); any other kind of key never gets them (cors.ts).
 */
function checkOrigin(o: StageOptions, ctx: ApiContext, origin: string): void {
  const app = ctx.principal.app;
  if (app.type !== 'public') return;
  if (o.cors?.originsOf(app)?.has(origin) !== true) throw originRefused();
  addHeaders(ctx, allowOriginHeaders(origin));
}

/**
 * SVC-PROXY-KEY from the header or the `svc-proxy-key` query parameter (docs/proxy.md). With the
 * proxy's require_auth, the caller must also hold an API key with proxy:invoke in the same tenant.
 * `outbound`: a request with SVC-PROXY-URL and no proxy key is the outbound proxy's
 * (docs/detokenization.md "Outbound proxy"): a private API key with proxy:invoke.
 */
function authenticateProxy(o: StageOptions, ctx: RequestScope, outbound: true): asserts ctx is ProxyContext & RequestScope;
function authenticateProxy(o: StageOptions, ctx: RequestScope, outbound: false): asserts ctx is InboundScope;
function authenticateProxy(o: StageOptions, ctx: RequestScope, outbound: boolean): void {
  const key = headerValue(ctx.req.headers['svc-proxy-key']) ?? proxyKeyParam(ctx.url);
  if (outbound && ctx.req.headers['svc-proxy-url'] !== undefined) {
    if (key) throw new ServiceError('invalid_proxy_url', { detail: 'Send either SVC-PROXY-KEY (a pre-configured proxy) or SVC-PROXY-URL (the outbound proxy), not both' });
    authenticateApi(o, ctx, OUTBOUND);
    return;
  }
  if (!key) {
    throw new ServiceError('missing_proxy_key', { detail: 'Send the proxy key in the SVC-PROXY-KEY header (or the svc-proxy-key query parameter)' });
  }
  const proxy = o.keys.findProxyKey(key);
  if (!proxy) throw new ServiceError('invalid_proxy_key');
  ctx.proxyPrincipal = proxy;
  if (!proxy.proxy.require_auth) return;
  authenticateApi(o, ctx, INVOKE);
  if (ctx.principal.tenant.id !== proxy.tenant.id) {
    throw new ServiceError('forbidden', { detail: "The API key does not belong to the proxy's tenant" });
  }
}

const OUTBOUND = { permission: 'proxy:invoke', kinds: ['private'] } as const;
const INVOKE = { permission: 'proxy:invoke' } as const;

function proxyKeyParam(url: URL): string | undefined {
  for (const [name, value] of url.searchParams) if (name.toLowerCase() === 'svc-proxy-key') return value;
  return undefined;
}

export function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}
