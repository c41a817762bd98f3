/**
 * The outbound proxy (docs/detokenization.md "Outbound proxy"): `ANY /proxy[/<suffix>]` with `SVC-PROXY-URL` and
 * an `SVC-API-KEY` of a private key with `proxy:invoke` (the pipeline checked the key and the rate
 * limit). In order, so that a refusal sends nothing anywhere:
 *  1. the destination is checked against the tenant's allow-list and its host resolved once, every
 *     address checked (egress.ts), before the body is read;
 *  2. the body (bounded by server.body_limit_bytes), header values and query are detokenized in one
 *     all-or-nothing step: `token:use` on every token, one audit event (detokenize-request.ts);
 *  3. the request goes to exactly the checked address; the response streams back untouched, with
 *     SVC-PROXY-DESTINATION-STATUS, and no redirect is followed.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { ServiceError } from '../errors.js';
import { mediaType, readBody } from '../http/body.js';
import type { ApiContext } from '../http/context.js';
import { ProxyBody } from './body.js';
import { detokenizeParts, type UseResolver } from './detokenize-request.js';
import { destinationPath, parseDestination, splitProxyTarget } from './destination.js';
import type { EgressPolicy } from './egress.js';
import { outgoingHeaders, responseHeaders } from './headers.js';
import { refuseMethod } from './methods.js';
import { answerHeaders, checkTransferEncoding, forwardOrCut, isIdentity } from './forward.js';
import { streamVia } from './upstream.js';

export const PROXY_URL_HEADER = 'svc-proxy-url';

/** What the outbound proxy needs of the Detokenizer (src/detokenize/service.ts). */
export type { UseResolver };

export interface OutboundOptions {
  egress: EgressPolicy;
  detokenizer: UseResolver;
  bodyLimit: number;
  maxDepth: number;
}

function invalidUrl(detail: string): ServiceError {
  return new ServiceError('invalid_proxy_url', { detail });
}

/** The destination named by SVC-PROXY-URL: an absolute http(s) URL without credentials or fragment. */
export function parseProxyUrl(value: string | string[] | undefined): URL {
  if (Array.isArray(value)) throw invalidUrl('Send SVC-PROXY-URL once');
  if (value === undefined || value.trim() === '') throw invalidUrl('Send the destination in the SVC-PROXY-URL header');
  let url: URL;
  try {
    url = new URL(value.trim());
  } catch {
    throw invalidUrl('SVC-PROXY-URL must be an absolute URL, e.g. https://api.example.com/v1');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw invalidUrl('SVC-PROXY-URL must be an http or https URL');
  if (url.username !== '' || url.password !== '') throw invalidUrl('SVC-PROXY-URL must not carry credentials: send an Authorization header instead');
  if (url.hash !== '') throw invalidUrl('SVC-PROXY-URL must not carry a fragment');
  return url;
}

/**
 * The caller's headers for the destination: hop-by-hop, SVC-* (keys, the URL) and framing removed
 * as for every proxy, and no X-Forwarded-*: a third party learns nothing of the caller's network.
 */
function outboundHeaders(incoming: IncomingHttpHeaders): Record<string, string | string[]> {
  const out = outgoingHeaders(incoming, { peer: '', peerTrusted: false, host: undefined });
  delete out['x-forwarded-for'];
  delete out['x-forwarded-proto'];
  delete out['x-forwarded-host'];
  return out;
}

export class OutboundProxy {
  constructor(private readonly opts: OutboundOptions) {}

  async handle(ctx: ApiContext): Promise<void> {
    const method = ctx.req.method ?? 'GET';
    refuseMethod(method);
    checkTransferEncoding(ctx.req.headers['transfer-encoding']);
    const principal = ctx.principal;
    const url = parseProxyUrl(ctx.req.headers[PROXY_URL_HEADER]);
    const full = destinationPath(parseDestination(url.href), splitProxyTarget(ctx.req.url ?? '/'));
    // 1. Where to, before anything is read or resolved for use.
    const target = await this.opts.egress.resolve(principal.tenant.id, url);
    if (!isIdentity(ctx.req.headers['content-encoding'])) {
      throw new ServiceError('unsupported_media_type', { detail: 'The outbound proxy reads request bodies: send them without Content-Encoding' });
    }
    // 2. Detokenize, all or nothing.
    const body = new ProxyBody(await readBody(ctx.req, this.opts.bodyLimit), mediaType(ctx.req), this.opts.maxDepth, { caller: ctx.req.headers['content-type'] });
    const q = full.indexOf('?');
    const path = q === -1 ? full : full.slice(0, q);
    const parts = await detokenizeParts(body, outboundHeaders(ctx.req.headers), q === -1 ? '' : full.slice(q + 1), (ids) =>
      this.opts.detokenizer.resolveForUse(principal, ids, { action: 'proxy.outbound', destination: target.origin, requestId: ctx.requestId }),
    );
    const bytes = body.serialize();
    // 3. Forward to the checked address; stream the answer back as it comes.
    const request = { method, path: parts.query === '' ? path : `${path}?${parts.query}`, headers: parts.headers, body: bytes.length > 0 ? bytes : undefined };
    await forwardOrCut(ctx, () =>
      streamVia(target.dispatcher, request, (head) => {
        ctx.res.writeHead(head.statusCode, answerHeaders(ctx, head, responseHeaders(head.headers, true)));
        return ctx.res;
      }),
    );
  }

  close(): Promise<void> {
    return this.opts.egress.close();
  }
}
