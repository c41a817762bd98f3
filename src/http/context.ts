/**
 * The request context that flows through a route's stages. A stage enriches it, answers, or
 * throws a ServiceError.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { KeyKind, Principal, ProxyPrincipal } from '../auth/keys.js';
import type { Permission } from '../config/schema.js';
import type { Logger } from '../log.js';
import type { RouteSchemas } from './route-schema.js';

import type { RouteGroup } from '../rate-limit/rules.js';

/** The route groups are defined once, with the rate-limit rules that name them. */
export type { RouteGroup };

export interface Context {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  requestId: string;
  log: Logger;
  clientIp: string;
  params: Record<string, string>;
  /** What a wildcard route matched (raw), e.g. the proxy suffix. */
  rest: string;
  principal?: Principal;
  proxyPrincipal?: ProxyPrincipal;
  /** Headers every response of this request carries (trace id, rate-limit headers). */
  headers: Record<string, string>;
  /** The query as parsed by the route's `schemas.query` (set only when the route has one). */
  query?: Record<string, unknown>;
  /**
   * Reads the JSON body within the configured limits (415/413/400 otherwise), checked by the
   * route's `schemas.body`. `observe` sees the raw bytes before they are parsed (the idempotency
   * stage hashes them) and may throw.
   */
  readJson(accept?: (mediaType: string) => boolean, observe?: (raw: Buffer) => Promise<void>): Promise<unknown>;
}

export interface Route {
  method: string;
  path: string;
  group: RouteGroup;
  /**
   * `api`: SVC-API-KEY; `proxy`: SVC-PROXY-KEY (header or `svc-proxy-key` query parameter), plus
   * SVC-API-KEY with proxy:invoke in the proxy's tenant when the proxy has require_auth; `none`: open.
   */
  auth: 'api' | 'proxy' | 'none';
  /** Error bodies of this route are nested under this member (`{"proxy_error": problem}`). */
  wrapErrors?: 'proxy_error';
  /** Route-level permission (container-level checks happen in the vault). */
  permission?: Permission;
  /** SVC-IDEMPOTENCY-KEY is honoured: the first successful answer is stored and replayed (http/idempotency.ts). */
  idempotent?: boolean;
  /**
   * For an idempotent route whose answer is one token record shown by the key's read rule (PATCH
   * /tokens/{id}): the stored answer leaves the record's `data` out, and a replay calls this to show
   * the token again, through the same access decision and audit as the route's own answer (issue
   * 23: idempotency records never hold plaintext). It throws as the route would: 404 not_found
   * for a deleted or expired token.
   */
  replayRecord?(ctx: Context, id: string): Promise<Record<string, unknown>>;
  /** Key kinds admitted (default: all). */
  kinds?: readonly KeyKind[];
  /** Request and response schemas: they validate the request and make the OpenAPI document (route-schema.ts). */
  schemas?: RouteSchemas;
  handle(ctx: Context): Promise<void>;
}
