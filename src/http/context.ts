/**
 * What a request carries through its route's stages (http/stages.ts), and what a route declares
 * so that its stages can be built once, when the routes are built: its auth kind, its
 * body mode, whether it is idempotent. A stage enriches the context, answers, or throws a
 * ServiceError.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { KeyKind, Principal, ProxyPrincipal } from '../auth/keys.js';
import type { Permission } from '../config/schema.js';
import type { Logger } from '../log.js';
import type { RouteSchemas } from './route-schema.js';

import type { RouteGroup } from '../rate-limit/rules.js';

/** The route groups are defined once, with the rate-limit rules that name them. */
export type { RouteGroup };

/**
 * What the stages before the handler see, on both entries: a request has a response, an upgrade
 * request a socket, and neither is here.
 */
export interface RequestScope {
  req: IncomingMessage;
  url: URL;
  requestId: string;
  log: Logger;
  clientIp: string;
  params: Record<string, string>;
  /** What a wildcard route matched (raw), e.g. the proxy suffix. */
  rest: string;
  /** Set by the authenticate stage of an `api` route (and of a proxy with require_auth, and the outbound proxy). */
  principal?: Principal;
  /** Set by the authenticate stage of a `proxy` route when SVC-PROXY-KEY named a proxy. */
  proxyPrincipal?: ProxyPrincipal;
  /** Headers every response of this request carries (trace id, rate-limit headers). */
  headers: Record<string, string>;
}

export interface Context extends RequestScope {
  res: ServerResponse;
  /** The query as parsed by the route's `schemas.query` (set only when the route has one). */
  query?: Record<string, unknown>;
  /**
   * The JSON body, read within the configured limits (415/413/400 otherwise) and checked by the
   * route's `schemas.body` by the body stage, before the handler runs. Undefined for a route
   * whose body mode is `none` or `stream`.
   */
  body: unknown;
}

/** The context of a handler whose route authenticated an API key: the principal is set. */
export type ApiContext = Context & { principal: Principal };
/** A request through a pre-configured proxy: SVC-PROXY-KEY named it (and with require_auth, an API key was checked too). */
export type InboundScope = RequestScope & { proxyPrincipal: ProxyPrincipal };
export type InboundContext = Context & { proxyPrincipal: ProxyPrincipal };
/** The proxy route's handler: a pre-configured proxy, or the outbound proxy (SVC-PROXY-URL and an API key). */
export type ProxyContext = InboundContext | ApiContext;

/** Which of the two a proxy request is (its principal narrows the type). */
export function isInbound(ctx: ProxyContext): ctx is InboundContext {
  return ctx.proxyPrincipal !== undefined;
}

/**
 * How the body stage reads a route's body: `none`, not read (a refusal drains or lingers: linger.ts);
 * `stream`, the handler reads it itself (the proxy); `json`, read and parsed before the handler,
 * a body over 64 KiB parsed in the JSON worker when it holds few values (body.ts LargeBodyMode
 * `small`); `json-walked`, over 64 KiB walked and answered in the JSON worker (the tokenize
 * routes); `json-args`, over 64 KiB handed on as the `args` member's JSON text (reactors).
 */
export type BodyMode = 'none' | 'stream' | 'json' | 'json-walked' | 'json-args';

/** What a handler may return instead of writing the response itself: a JSON answer. Idempotent routes must. */
export interface JsonAnswer {
  status: number;
  json: unknown;
}

interface RouteBase {
  method: string;
  path: string;
  group: RouteGroup;
  /** How the body stage reads the body (only `api` routes have a JSON body read for them). */
  body: BodyMode;
  /** Error bodies of this route are nested under this member (`{"proxy_error": problem}`). */
  wrapErrors?: 'proxy_error';
  /** Route-level permission (container-level checks happen in the vault). */
  permission?: Permission;
  /** Key kinds admitted (default: all). */
  kinds?: readonly KeyKind[];
  /** Request and response schemas: they validate the request and make the OpenAPI document (route-schema.ts). */
  schemas?: RouteSchemas;
  /**
   * The route only refuses its method: not a
   * method the path allows, so a 405's Allow and a preflight's methods leave it out.
   */
  refused?: true;
}

/** SVC-API-KEY. */
export interface ApiRoute extends RouteBase {
  auth: 'api';
  /**
   * SVC-IDEMPOTENCY-KEY is honoured: the first successful answer is stored and replayed
   * (http/idempotency.ts). The handler must return its answer (a JsonAnswer), not write it.
   */
  idempotent?: boolean;
  /**
   * For an idempotent route whose answer is one token record shown by the key's read rule (PATCH
   * /tokens/{id}): the stored answer leaves the record's `data` out, and a replay calls this to show
   * the token again, through the same access decision and audit as the route's own answer (issue
   * 23: idempotency records never hold plaintext). It throws as the route would: 404 not_found
   * for a deleted or expired token.
   */
  replayRecord?(ctx: ApiContext, id: string): Promise<Record<string, unknown>>;
  /** The route's own check of the request against the principal, before the body is read (e.g. 404 for another tenant's reactor). */
  check?(ctx: ApiContext): void;
  handle(ctx: ApiContext): Promise<JsonAnswer | void>;
}

/**
 * SVC-PROXY-KEY (header or `svc-proxy-key` query parameter), plus SVC-API-KEY with proxy:invoke
 * in the proxy's tenant when the proxy has require_auth; or SVC-PROXY-URL with an API key (the
 * outbound proxy).
 */
export interface ProxyRoute extends RouteBase {
  auth: 'proxy';
  body: 'stream';
  handle(ctx: ProxyContext): Promise<void>;
  /** Upgrade requests (WebSocket) at this route: after the same stages, with the proxy key only. */
  upgrade?(ctx: InboundScope, socket: Duplex, head: Buffer): void;
}

/** Open: no key. */
export interface OpenRoute extends RouteBase {
  auth: 'none';
  body: 'none';
  handle(ctx: Context): Promise<void>;
}

export type Route = ApiRoute | ProxyRoute | OpenRoute;
