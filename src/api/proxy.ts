/**
 * `ANY /proxy/<suffix>?<query>` (docs/proxy.md, and docs/detokenization.md "Outbound proxy"). The pipeline
 * authenticates SVC-PROXY-KEY (and, with require_auth, SVC-API-KEY with proxy:invoke), or for the
 * outbound proxy (SVC-PROXY-URL, no proxy key) SVC-API-KEY of a private key with proxy:invoke, and counts the proxy
 * rate limit before this handler runs; errors of tokenproxy itself are wrapped as
 * `{"proxy_error": {…problem…}}` so a caller can tell them from the destination's own answers.
 */
import { ServiceError } from '../errors.js';
import { isInbound, type Route } from '../http/context.js';
import type { OutboundProxy } from '../proxy/outbound.js';
import type { InboundProxy } from '../proxy/inbound.js';
import { ProxyError } from './schemas.js';

const description = [
  'Forwards the request to the destination of the proxy that the key names, applying its request transforms (tokenize, detokenize, code) and',
  'its response transforms. The answer is the destination\'s, with SVC-PROXY-DESTINATION-STATUS. Errors of tokenproxy itself are',
  '`{"proxy_error": problem}` (application/json) and carry no SVC-PROXY-DESTINATION-STATUS. WebSocket upgrades are accepted when the proxy allows them.',
].join(' ');

const wrapped = (d: string) => ({ description: d, body: ProxyError });
const responses = {
  400: wrapped('The path, body or upgrade is refused (invalid_proxy_path, upgrade_not_allowed, invalid_json, validation_failed, …)'),
  413: wrapped('The body is over the limit (body_too_large)'),
  422: wrapped('A card number would have left in plaintext (leak_detected)'),
  501: wrapped('The request transfer coding is not supported (unsupported_transfer_encoding)'),
  502: wrapped('The destination could not be reached or its answer transformed (destination_unreachable, destination_response_untransformable)'),
  504: wrapped('The destination did not answer in time (destination_timeout)'),
  500: wrapped('A code transform failed (reactor_runtime_error, reactor_out_of_memory, reactor_invalid_output)'),
  503: wrapped('The reactor host, a store or the rate-limit store is unavailable'),
  '4XX': wrapped("Another error of tokenproxy (a code transform may pass its own status on, as reactor_error); the destination's own answers are under default"),
  '5XX': wrapped("Another error of tokenproxy; the destination's own answers are under default"),
};

export function proxyRoutes(proxies: InboundProxy, outbound?: OutboundProxy): Route[] {
  return [
    {
      method: '*',
      path: '/proxy/*',
      group: 'proxy',
      auth: 'proxy',
      // The proxy streams or buffers the body itself (proxy/inbound.ts, proxy/outbound.ts).
      body: 'stream',
      wrapErrors: 'proxy_error',
      schemas: { summary: 'The inbound proxy (SVC-PROXY-KEY) and the outbound proxy (SVC-PROXY-URL)', tags: ['proxy'], description, responses },
      // A proxy key found a pre-configured proxy; without one, the pipeline took SVC-PROXY-URL.
      handle: (ctx) => {
        if (isInbound(ctx)) return proxies.handle(ctx);
        if (!outbound) throw new ServiceError('route_not_found', { detail: 'The outbound proxy is not enabled in this service' });
        return outbound.handle(ctx);
      },
      upgrade: (ctx, socket, head) => proxies.upgrade(ctx, socket, head),
    },
  ];
}
