/**
 * The request pipeline, built once: route → request id → authenticate → permission →
 * rate-limit → path and query validated by the route's schemas → handler (which reads the body,
 * validated by the same schemas: route-schema.ts). Cheap rejections come first: no body is read before authentication
 * and rate limiting pass. Every error becomes a problem body in respond.ts.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { randomUUID } from 'node:crypto';
import { holds } from '../auth/access.js';
import type { KeyIndex } from '../auth/keys.js';
import { ServiceError } from '../errors.js';
import { scrubCards, writeAccessLine, type AccessFields, type Logger } from '../log.js';
import { JSON_MEDIA_TYPES, readJson, type LargeBodyMode } from './body.js';
import type { Context, Route } from './context.js';
import { allowOriginHeaders, crossOrigin, originRefused, preflightHeaders, type CorsPolicy } from './cors.js';
import { answerEarly, type LingerOptions } from './linger.js';
import { sendProblem, sendSocketProblem } from './respond.js';
import { Router } from './router.js';
import { UNMATCHED_ROUTE, type RequestMetrics } from './metrics.js';
import { parseBody, parseInput, queryObject } from './route-schema.js';

export interface RateLimitGate {
  /** Resolves with headers for the response, or throws ServiceError (429 / 503). */
  check(ctx: Context, route: Route): Promise<Record<string, string>>;
}

export interface PipelineOptions {
  routes: Route[];
  keys: KeyIndex;
  log: Logger;
  bodyLimit: number;
  maxDepth: number;
  clientIp: (socketAddress: string, xForwardedFor: string | undefined) => string;
  rateLimits?: RateLimitGate;
  /** Bounds of the lingering close after an early answer (linger.ts). */
  linger: LingerOptions;
  /** Request durations by route pattern (docs/operations.md "Metrics"); absent when metrics are off. */
  metrics?: RequestMetrics;
  /** Which page origins may read answers (public applications' allowed_origins, cors.ts). */
  cors?: CorsPolicy;
}

const TRACE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * How each route group's large JSON bodies are parsed (body.ts, large-json.ts): the tokenize
 * routes hand the body only to the vault's walk, so it is walked and answered in the JSON worker;
 * reactors pass `args` on to the reactor host as JSON text; every other route takes small bodies.
 */
function largeBodyMode(group: string): LargeBodyMode {
  if (group === 'tokenize' || group === 'tokens.create') return 'walked';
  if (group === 'reactor') return 'args';
  return 'small';
}

/** Where src/api/openapi.ts serves the document of the routes. */
const OPENAPI_PATH = '/openapi.json';

export function createPipeline(opts: PipelineOptions): (req: IncomingMessage, res: ServerResponse) => void {
  // A 404 says where the routes are (issue 29), when this listener serves the document.
  const listed = opts.routes.some((r) => r.method === 'GET' && r.path === OPENAPI_PATH);
  const router = new Router(opts.routes, listed ? `No route has this path: GET ${OPENAPI_PATH} lists every route of this service` : undefined);
  const logAccess = opts.log.isLevelEnabled('info');
  // One listener for both records of a finished request, the metric and the access line, shared by
  // every request (it finds the request's state on the response): no closure per request.
  const onFinish = opts.metrics || logAccess ? finishListener(opts, logAccess) : undefined;
  return (req, res) => {
    void handle(opts, router, req, res, onFinish);
  };
}

const STATE = Symbol('tokenproxy.request');
type TrackedResponse = ServerResponse & { [STATE]?: RequestContext };

function finishListener(opts: PipelineOptions, logAccess: boolean): (this: TrackedResponse) => void {
  return function onFinish(this: TrackedResponse) {
    const ctx = this[STATE];
    if (!ctx) return;
    this[STATE] = undefined;
    const route = ctx.route;
    opts.metrics?.request(ctx.req.method, route?.path ?? UNMATCHED_ROUTE, this.statusCode, ctx.started);
    if (!logAccess) return;
    const ms = performance.now() - ctx.started;
    // Method, route pattern and status only: never the raw URL (a query may carry a proxy key).
    writeAccessLine(opts.log, ctx.requestId, {
      method: ctx.req.method, route: route?.path ?? '(none)', status: this.statusCode, ms: Math.round(ms * 100) / 100,
      tenant: ctx.principal?.tenant.id ?? ctx.proxyPrincipal?.tenant.id, app: ctx.principal?.app.id,
    });
  };
}

/**
 * One request's context (http/context.ts): a class, so a request allocates one object rather than
 * an object literal with accessors and closures; the URL and the child logger are made on first use.
 */
class RequestContext implements Context {
  readonly headers: Record<string, string>;
  params: Record<string, string> = NO_PARAMS;
  rest = '';
  principal?: Context['principal'] = undefined;
  proxyPrincipal?: Context['proxyPrincipal'] = undefined;
  query?: Record<string, unknown> = undefined;
  route: Route | undefined = undefined;
  #url: URL | undefined = undefined;
  #log: Logger | undefined = undefined;
  #clientIp: string | undefined = undefined;

  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    readonly requestId: string,
    readonly started: number,
    private readonly opts: PipelineOptions,
  ) {
    this.headers = { 'svc-trace-id': requestId };
  }

  get url(): URL {
    return (this.#url ??= parseTarget(this.req.url ?? '/'));
  }

  set url(value: URL) {
    this.#url = value;
  }

  get log(): Logger {
    return (this.#log ??= this.opts.log.child({ req_id: this.requestId }));
  }

  get clientIp(): string {
    return (this.#clientIp ??= this.opts.clientIp(this.req.socket.remoteAddress ?? '', headerValue(this.req.headers['x-forwarded-for'])));
  }

  async readJson(accept?: (mediaType: string) => boolean, observe?: (raw: Buffer) => Promise<void>): Promise<unknown> {
    const schemas = this.route?.schemas;
    const large = largeBodyMode(this.route?.group ?? 'health');
    // The route's schema names the media types it takes (its `accept` tests them): the 415 lists them.
    const accepted = schemas?.body?.mediaTypes ?? JSON_MEDIA_TYPES;
    return parseBody(schemas, await readJson(this.req, this.opts.bodyLimit, this.opts.maxDepth, accept, large, observe, accepted));
  }
}

const NO_PARAMS: Record<string, string> = Object.freeze({}) as Record<string, string>;

async function handle(opts: PipelineOptions, router: Router<Route>, req: IncomingMessage, res: ServerResponse, onFinish: ((this: TrackedResponse) => void) | undefined): Promise<void> {
  const ctx = new RequestContext(req, res, requestIdOf(req), performance.now(), opts);
  if (onFinish) {
    (res as TrackedResponse)[STATE] = ctx;
    res.on('finish', onFinish);
  }
  try {
    const target = req.url ?? '/';
    const path = simplePathname(target);
    // Only a request that names another origin pays for CORS (issue 27): one header lookup.
    const origin = req.headers.origin === undefined ? undefined : crossOrigin(req);
    if (origin !== undefined && req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined
      && preflight(opts, router, ctx, origin, path ?? ctx.url.pathname)) return;
    const match = router.match(req.method ?? 'GET', path ?? ctx.url.pathname);
    const route = match.route;
    ctx.route = route;
    ctx.params = match.params;
    ctx.rest = match.rest;
    const schemas = route.schemas;
    // Before the key is checked, so that a page can read a 401 or a 429 (cors.ts).
    if (origin !== undefined) {
      ctx.headers.vary = 'Origin';
      if (opts.cors?.routeAllows(origin, route)) Object.assign(ctx.headers, allowOriginHeaders(origin));
    }
    if (route.auth === 'api') {
      authenticate(opts, ctx, route);
      if (origin !== undefined) checkOrigin(opts, ctx, origin);
    } else if (route.auth === 'proxy') authenticateProxy(opts, ctx, true);
    if (opts.rateLimits && route.group !== 'health') Object.assign(ctx.headers, await opts.rateLimits.check(ctx, route));
    if (schemas?.params) ctx.params = parseInput(schemas, 'params', schemas.params, ctx.params) as Record<string, string>;
    if (schemas?.query) ctx.query = parseInput(schemas, 'query', schemas.query, queryObject(ctx.url.searchParams)) as Record<string, unknown>;
    await route.handle(ctx);
  } catch (err) {
    if (!(err instanceof ServiceError)) ctx.log.error({ error: safeError(err) }, 'unhandled error');
    else if (err.status >= 500) ctx.log.warn({ code: err.code, cause: safeError(err.cause) }, 'request failed');
    drainAndAnswer(opts, req, res, err, ctx.headers, ctx.route?.wrapErrors);
  }
}

/**
 * A CORS preflight (cors.ts): 204 with the methods at this path that a public application listing
 * the origin may call; 403 origin_not_allowed when the requested method is not among them; the
 * router's 404 for a path no route serves. Nothing is authenticated or counted: it carries no key.
 * Paths of the proxies and of open routes are not ours to answer for (false): a proxy's OPTIONS
 * goes to its destination as before, which answers its own CORS.
 */
function preflight(opts: PipelineOptions, router: Router<Route>, ctx: RequestContext, origin: string, path: string): boolean {
  const routes = router.routesAt(path);
  if (routes.length === 0) throw new ServiceError('route_not_found');
  if (routes.some((r) => r.auth !== 'api')) return false;
  ctx.route = routes[0];
  const methods = [...new Set(routes.filter((r) => opts.cors?.routeAllows(origin, r)).flatMap((r) => (r.method === 'GET' ? ['GET', 'HEAD'] : [r.method])))];
  const asked = String(ctx.req.headers['access-control-request-method']).toUpperCase();
  ctx.headers.vary = 'Origin';
  if (!methods.includes(asked)) throw originRefused();
  ctx.res.writeHead(204, { ...ctx.headers, ...preflightHeaders(origin, methods) });
  ctx.res.end();
  return true;
}

/**
 * After a key was found on a request from another origin: a public key only from its
 * application's allowed_origins (else 403, and no header that lets the page read it); any
 * other kind of key never gets the header (cors.ts).
 */
function checkOrigin(opts: PipelineOptions, ctx: Context, origin: string): void {
  const app = ctx.principal!.app;
  const listed = app.type === 'public' && opts.cors?.originsOf(app)?.has(origin) === true;
  if (listed) return;
  delete ctx.headers['access-control-allow-origin'];
  delete ctx.headers['access-control-expose-headers'];
  if (app.type === 'public') throw originRefused();
}

function parseTarget(target: string): URL {
  return new URL(target, 'http://localhost');
}

/**
 * A path of only these characters and without `.`/`..` segments is what the WHATWG URL parser
 * would return as its pathname, unchanged: nothing to percent-encode, no backslash, no dot
 * segment to remove.
 */
const SIMPLE_PATH = /^\/[A-Za-z0-9\-_~!$&'()*+,;=:@/.]*$/;
const DOT_SEGMENT = /\/\.\.?(?:\/|$)/;

/**
 * The pathname of a request target without parsing a URL (about 2 µs a request), when the path is
 * simple; null when only the URL parser can say (then the router gets its pathname).
 */
export function simplePathname(target: string): string | null {
  const q = target.indexOf('?');
  const path = q === -1 ? target : target.slice(0, q);
  if (!SIMPLE_PATH.test(path) || (path.includes('.') && DOT_SEGMENT.test(path))) return null;
  return path;
}

/**
 * The request id: a valid SVC-Trace-Id without a card number in it, else a new UUID. The id is
 * logged on every line of the request (a logger binding, which the log's card scrubber does not
 * see): a trace id holding a card number is replaced, as a malformed one is.
 */
function requestIdOf(req: IncomingMessage): string {
  const trace = req.headers['svc-trace-id'];
  return typeof trace === 'string' && TRACE_ID.test(trace) && scrubCards(trace) === trace ? trace : randomUUID();
}

/**
 * For an upgrade request: the request id (a valid SVC-Trace-Id without a card number in it, else a new UUID), its logger and the headers every answer
 * carries. The child logger is made on first use: most requests never log beyond the access line.
 */
function identify(
  opts: PipelineOptions,
  req: IncomingMessage,
): { requestId: string; log: () => Logger; access: (fields: AccessFields) => void; headers: Record<string, string> } {
  const requestId = requestIdOf(req);
  let child: Logger | undefined;
  return {
    requestId,
    log: () => (child ??= opts.log.child({ req_id: requestId })),
    // The access line, with req_id as the child logger would bind it, without making one.
    access: (fields) => {
      if (opts.log.isLevelEnabled('info')) writeAccessLine(opts.log, requestId, fields);
    },
    headers: { 'svc-trace-id': requestId },
  };
}

/**
 * SVC-PROXY-KEY from the header or the `svc-proxy-key` query parameter (docs/proxy.md). With the
 * proxy's require_auth, the caller must also hold an API key with proxy:invoke in the same tenant.
 */
function authenticateProxy(opts: PipelineOptions, ctx: Context, outbound: boolean): void {
  const key = headerValue(ctx.req.headers['svc-proxy-key']) ?? proxyKeyParam(ctx.url);
  // The outbound proxy (docs/detokenization.md "Outbound proxy"): SVC-PROXY-URL and no proxy key.
  if (outbound && ctx.req.headers['svc-proxy-url'] !== undefined) {
    if (key) throw new ServiceError('invalid_proxy_url', { detail: 'Send either SVC-PROXY-KEY (a pre-configured proxy) or SVC-PROXY-URL (the outbound proxy), not both' });
    authenticate(opts, ctx, { permission: 'proxy:invoke', kinds: ['private'] });
    return;
  }
  if (!key) {
    throw new ServiceError('missing_proxy_key', { detail: 'Send the proxy key in the SVC-PROXY-KEY header (or the svc-proxy-key query parameter)' });
  }
  const proxy = opts.keys.findProxyKey(key);
  if (!proxy) throw new ServiceError('invalid_proxy_key');
  ctx.proxyPrincipal = proxy;
  if (!proxy.proxy.require_auth) return;
  authenticate(opts, ctx, { permission: 'proxy:invoke' });
  if (ctx.principal!.tenant.id !== proxy.tenant.id) {
    throw new ServiceError('forbidden', { detail: "The API key does not belong to the proxy's tenant" });
  }
}

function proxyKeyParam(url: URL): string | undefined {
  for (const [name, value] of url.searchParams) if (name.toLowerCase() === 'svc-proxy-key') return value;
  return undefined;
}

/**
 * Upgrade requests (`Connection: Upgrade`, e.g. WebSocket) never reach the request handler; Node
 * emits them on the server's 'upgrade' event. Only `/proxy/*` accepts them, with the same stages as
 * a plain proxy request: proxy key (and API key with require_auth), then the rate limit, then
 * `forward`. A refusal is written to the raw socket as a wrapped problem and the socket closed.
 */
export function createUpgradeHandler(
  opts: PipelineOptions,
  forward: (ctx: Context, socket: Duplex, head: Buffer) => void,
): (req: IncomingMessage, socket: Duplex, head: Buffer) => void {
  return (req, socket, head) => {
    socket.on('error', () => socket.destroy());
    const started = performance.now();
    const { requestId, log, access, headers } = identify(opts, req);
    void (async () => {
      let status = 101;
      let route = UNMATCHED_ROUTE;
      try {
        const url = new URL(req.url ?? '/', 'http://localhost');
        if (!url.pathname.startsWith('/proxy/')) throw new ServiceError('route_not_found', { detail: 'Only /proxy/* accepts protocol upgrades' });
        route = '/proxy/*';
        const ctx: Context = {
          req, res: undefined as unknown as ServerResponse, url, requestId, log: log(), headers,
          clientIp: opts.clientIp(req.socket.remoteAddress ?? '', headerValue(req.headers['x-forwarded-for'])),
          params: {}, rest: '',
          readJson: () => Promise.reject(new ServiceError('unsupported_media_type')),
        };
        authenticateProxy(opts, ctx, false);
        if (opts.rateLimits) Object.assign(headers, await opts.rateLimits.check(ctx, { group: 'proxy' } as Route));
        forward(ctx, socket, head);
      } catch (err) {
        if (!(err instanceof ServiceError)) log().error({ error: safeError(err) }, 'unhandled error');
        status = sendSocketProblem(socket, err, headers, 'proxy_error');
      }
      access({ method: req.method, route: '/proxy/* (upgrade)', status });
      // Until the 101 (or the refusal) only: the relayed connection is not a request.
      opts.metrics?.request(req.method, route, status, started);
    })();
  };
}

function authenticate(opts: PipelineOptions, ctx: Context, route: Pick<Route, 'kinds' | 'permission'>): void {
  const key = headerValue(ctx.req.headers['svc-api-key']);
  if (!key) throw new ServiceError('missing_api_key', { detail: 'Send the API key in the SVC-API-KEY header' });
  const principal = opts.keys.findApiKey(key);
  if (!principal) throw new ServiceError('invalid_api_key');
  ctx.principal = principal;
  if (route.kinds && !route.kinds.includes(principal.app.type)) {
    throw new ServiceError('forbidden', { detail: `This route needs a ${route.kinds.join(' or ')} key` });
  }
  if (route.permission && !holds(principal.app, route.permission)) {
    throw new ServiceError('forbidden', { detail: `The key lacks the permission ${route.permission}` });
  }
}

export function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** Only the error's class and code: dependency messages may quote values. */
export function safeError(err: unknown): Record<string, unknown> | undefined {
  if (!(err instanceof Error)) return undefined;
  const code = (err as NodeJS.ErrnoException).code;
  return { type: err.name, ...(code ? { code } : {}), stack: err.stack?.split('\n').slice(1, 6).join('\n') };
}

/** Answers with the problem, after draining a small unread body or with a lingering close (linger.ts). */
function drainAndAnswer(opts: PipelineOptions, req: IncomingMessage, res: ServerResponse, err: unknown, headers: Record<string, string>, wrap?: string): void {
  answerEarly(req, res, opts.linger, (extra) => sendProblem(res, err, { ...headers, ...extra }, wrap));
}
