/**
 * The two entries of the request pipeline, built once per model: the HTTP request and the
 * upgrade request. Each does `route` (the router's match on the path as sent, request-path.ts: a
 * dot segment is 400; then a transfer coding other than chunked is 501, transfer-coding.ts; both
 * before any key is looked at) and `identify` (the request id, its logger, the headers every
 * answer carries) and hands the request to its route's compiled stages
 * (stages.ts: authenticate → rate limit → input → idempotency → body → handler). Every error
 * becomes a problem body in respond.ts; the access line and the request metric are written here.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { randomUUID } from 'node:crypto';
import { ServiceError } from '../errors.js';
import { errorFields, scrubCards, writeAccessLine, type Logger } from '../log.js';
import type { Context, ProxyRoute, RequestScope, Route } from './context.js';
import { crossOrigin, originRefused, preflightHeaders } from './cors.js';
import { answerEarly, type LingerOptions } from './linger.js';
import { sendProblem, sendSocketProblem } from './respond.js';
import { hasDotSegment, routedPath } from './request-path.js';
import { Router } from './router.js';
import { UNMATCHED_ROUTE, type RequestMetrics } from './metrics.js';
import { asServiceError } from './service-error.js';
import { compileRoute, compileUpgrade, headerValue, type CompiledRoute, type CompiledUpgrade, type StageOptions } from './stages.js';
import { refuseTransferCoding } from './transfer-coding.js';

export type { RateLimitGate } from './stages.js';
export { headerValue };

export interface PipelineOptions extends StageOptions {
  routes: Route[];
  log: Logger;
  clientIp: (socketAddress: string, xForwardedFor: string | undefined) => string;
  /** Bounds of the lingering close after an early answer (linger.ts). */
  linger: LingerOptions;
  /** Request durations by route pattern (docs/operations.md "Metrics"); absent when metrics are off. */
  metrics?: RequestMetrics;
}

const TRACE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Where src/api/openapi.ts serves the document of the routes. */
const OPENAPI_PATH = '/openapi.json';

/** A compiled route as the router holds it (router.ts matches on method and path). */
interface Entry<C> {
  method: string;
  path: string;
  /** Only refuses its method (RouteBase.refused): left out of Allow. */
  refused?: boolean;
  compiled: C;
}

export function createPipeline(opts: PipelineOptions): (req: IncomingMessage, res: ServerResponse) => void {
  // A 404 says where the routes are, when this listener serves the document.
  const listed = opts.routes.some((r) => r.method === 'GET' && r.path === OPENAPI_PATH);
  // Each route's stages are chosen here, once (stages.ts), not per request.
  const entries = opts.routes.map((r) => ({ method: r.method, path: r.path, refused: r.refused === true, compiled: compileRoute(r, opts) }));
  const router = new Router(entries, listed ? `No route has this path: GET ${OPENAPI_PATH} lists every route of this service` : undefined);
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
 * The `identify` stage's product, on both entries: the request id, the headers every answer
 * carries, and what is made on first use only (the URL, the child logger, the client address). A
 * class, so a request allocates one object rather than an object literal with accessors and closures.
 */
class Scope implements RequestScope {
  readonly headers: Record<string, string>;
  params: Record<string, string> = NO_PARAMS;
  rest = '';
  principal?: RequestScope['principal'] = undefined;
  proxyPrincipal?: RequestScope['proxyPrincipal'] = undefined;
  #url: URL | undefined = undefined;
  #log: Logger | undefined = undefined;
  #clientIp: string | undefined = undefined;

  constructor(
    readonly req: IncomingMessage,
    readonly started: number,
    private readonly opts: PipelineOptions,
    readonly requestId: string = requestIdOf(req),
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
}

/** One request's context (context.ts). */
class RequestContext extends Scope implements Context {
  query?: Record<string, unknown> = undefined;
  body: unknown = undefined;
  route: Route | undefined = undefined;

  constructor(req: IncomingMessage, readonly res: ServerResponse, started: number, opts: PipelineOptions) {
    super(req, started, opts);
  }
}

const NO_PARAMS: Record<string, string> = Object.freeze({}) as Record<string, string>;

/** The HTTP entry: route and identify, then the route's stages (stages.ts). */
async function handle(opts: PipelineOptions, router: Router<Entry<CompiledRoute>>, req: IncomingMessage, res: ServerResponse, onFinish: ((this: TrackedResponse) => void) | undefined): Promise<void> {
  const ctx = new RequestContext(req, res, performance.now(), opts);
  if (onFinish) {
    (res as TrackedResponse)[STATE] = ctx;
    res.on('finish', onFinish);
  }
  try {
    const path = routedPath(req.url ?? '/');
    if (hasDotSegment(path)) throw dotSegmentRefused(router, ctx, path);
    // Only a request that names another origin pays for CORS: one header lookup.
    const origin = req.headers.origin === undefined ? undefined : crossOrigin(req);
    if (origin !== undefined && req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined
      && preflight(opts, router, ctx, origin, path)) return;
    const match = router.match(req.method ?? 'GET', path);
    const compiled = match.route.compiled;
    const route = compiled.route;
    ctx.route = route;
    ctx.params = match.params;
    ctx.rest = match.rest;
    // Before the key and the body: a coding not applied would leave the body unreadable as sent.
    refuseTransferCoding(req.headers['transfer-encoding']);
    // The answer depends on the Origin; whether a page may read it, on the key (stages.ts checkOrigin).
    if (origin !== undefined) ctx.headers.vary = 'Origin';
    await compiled.run(ctx, origin);
  } catch (thrown) {
    const err = asServiceError(thrown);
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
function preflight(opts: PipelineOptions, router: Router<Entry<CompiledRoute>>, ctx: RequestContext, origin: string, path: string): boolean {
  const routes = router.routesAt(path).map((e) => e.compiled.route);
  if (routes.length === 0) throw new ServiceError('route_not_found');
  if (routes.some((r) => r.auth !== 'api')) return false;
  ctx.route = routes[0];
  const methods = [...new Set(routes.filter((r) => !r.refused && opts.cors?.routeAllows(origin, r)).flatMap((r) => (r.method === 'GET' ? ['GET', 'HEAD'] : [r.method])))];
  const asked = String(ctx.req.headers['access-control-request-method']).toUpperCase();
  ctx.headers.vary = 'Origin';
  if (!methods.includes(asked)) throw originRefused();
  ctx.res.writeHead(204, { ...ctx.headers, ...preflightHeaders(origin, methods) });
  ctx.res.end();
  return true;
}

/** The query's parser only (Scope.url): routing reads the path as sent (request-path.ts). */
function parseTarget(target: string): URL {
  return new URL(target, 'http://localhost');
}

/**
 * 400 for a path with a dot segment, on every route (request-path.ts): `invalid_proxy_path`,
 * wrapped, where the path is under `/proxy/*` (the proxy's own code for a path that would leave
 * its destination), else `invalid_path`. The path is not echoed.
 */
function dotSegmentRefused<C extends { route: Route }>(router: Router<Entry<C>>, ctx: RequestContext | Scope, path: string): ServiceError {
  const route = router.routesAt(path)[0]?.compiled.route;
  if (ctx instanceof RequestContext) ctx.route = route;
  if (route?.auth === 'proxy') {
    return new ServiceError('invalid_proxy_path', { detail: 'Dot segments (. and .., also percent-encoded) are not allowed in the proxy path' });
  }
  return new ServiceError('invalid_path', { detail: 'The path has a dot segment (. or .., also percent-encoded): send the path of the route itself' });
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

type UpgradeRoute = ProxyRoute & Required<Pick<ProxyRoute, 'upgrade'>>;

function takesUpgrades(r: Route): r is UpgradeRoute {
  return r.auth === 'proxy' && r.upgrade !== undefined;
}

/** What the access line names for every upgrade request, refused or not. */
const UPGRADE_ACCESS_ROUTE = '/proxy/* (upgrade)';

/**
 * Upgrade requests (`Connection: Upgrade`, e.g. WebSocket) never reach the request handler; Node
 * emits them on the server's 'upgrade' event. Only a route with `upgrade` (`/proxy/*`) takes them,
 * through the same stage list as a plain request of that route (stages.ts compileUpgrade): proxy
 * key (and API key with require_auth), the rate limit, then the route's `upgrade`. A refusal is
 * written to the raw socket as a wrapped problem and the socket closed.
 */
export function createUpgradeHandler(opts: PipelineOptions): (req: IncomingMessage, socket: Duplex, head: Buffer) => void {
  const entries = opts.routes.filter(takesUpgrades).map((r) => ({ method: r.method, path: r.path, compiled: compileUpgrade(r, opts) }));
  const router = new Router(entries, 'Only /proxy/* accepts protocol upgrades');
  const logAccess = opts.log.isLevelEnabled('info');
  return (req, socket, head) => {
    socket.on('error', () => socket.destroy());
    void upgrade(opts, router, logAccess, req, socket, head);
  };
}

async function upgrade(
  opts: PipelineOptions, router: Router<Entry<CompiledUpgrade>>, logAccess: boolean, req: IncomingMessage, socket: Duplex, head: Buffer,
): Promise<void> {
  const ctx = new Scope(req, performance.now(), opts);
  let status = 101;
  let route = UNMATCHED_ROUTE;
  try {
    const path = routedPath(req.url ?? '/');
    if (hasDotSegment(path)) throw dotSegmentRefused(router, ctx, path);
    const match = router.match(req.method ?? 'GET', path);
    // The router lets `/proxy` stand for its wildcard with nothing below it: not an upgrade target.
    if (!path.startsWith(match.route.path.slice(0, -1))) throw new ServiceError('route_not_found', { detail: 'Only /proxy/* accepts protocol upgrades' });
    refuseTransferCoding(req.headers['transfer-encoding']);
    ctx.params = match.params;
    ctx.rest = match.rest;
    route = match.route.path;
    await match.route.compiled.run(ctx, socket, head);
  } catch (thrown) {
    const err = asServiceError(thrown);
    if (!(err instanceof ServiceError)) ctx.log.error({ error: safeError(err) }, 'unhandled error');
    status = sendSocketProblem(socket, err, ctx.headers, 'proxy_error');
  }
  if (logAccess) writeAccessLine(opts.log, ctx.requestId, { method: req.method, route: UPGRADE_ACCESS_ROUTE, status });
  // Until the 101 (or the refusal) only: the relayed connection is not a request.
  opts.metrics?.request(req.method, route, status, ctx.started);
}

/** What log.ts errorFields says of the error (type and code; a store failure's class and message too), and where it was thrown: dependency messages may quote values. */
export function safeError(err: unknown): Record<string, unknown> | undefined {
  if (!(err instanceof Error)) return undefined;
  return { ...errorFields(err), stack: err.stack?.split('\n').slice(1, 6).join('\n') };
}

/** Answers with the problem, after draining a small unread body or with a lingering close (linger.ts). */
function drainAndAnswer(opts: PipelineOptions, req: IncomingMessage, res: ServerResponse, err: unknown, headers: Record<string, string>, wrap?: string): void {
  answerEarly(req, res, opts.linger, (extra) => sendProblem(res, err, { ...headers, ...extra }, wrap));
}
