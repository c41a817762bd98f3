/**
 * `ANY /proxy/<suffix>?<query>` (README "Inbound proxy"). The pipeline authenticates
 * SVC-PROXY-KEY (and, with require_auth, SVC-API-KEY with proxy:invoke) and counts the proxy
 * rate limit before this handler runs; errors of tokenproxy itself are wrapped as
 * `{"proxy_error": {…problem…}}` so a caller can tell them from the destination's own answers.
 */
import type { Route } from '../http/context.js';
import type { ProxyService } from '../proxy/service.js';

export function proxyRoutes(proxies: ProxyService): Route[] {
  return [
    {
      method: '*',
      path: '/proxy/*',
      group: 'proxy',
      auth: 'proxy',
      wrapErrors: 'proxy_error',
      handle: (ctx) => proxies.handle(ctx),
    },
  ];
}
