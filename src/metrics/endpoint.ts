/**
 * GET /metrics (docs/operations.md "Metrics"): the Prometheus text exposition format of the service's registry.
 * Not rate limited and not API-key authenticated (a scraper holds no tenant key); protected by an
 * optional bearer token (`metrics.token`, compared in constant time) and/or served only on the
 * admin listener (`server.admin`, or its older spelling `metrics.port`), loopback by default.
 */
import { timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sha256 } from '../auth/keys.js';
import type { AdminListener } from '../config/admin.js';
import type { Config } from '../config/schema.js';
import { ServiceError } from '../errors.js';
import type { Route } from '../http/context.js';
import { trackConnections, type ConnectionDrain } from '../http/drain.js';
import { sendProblem, sendText } from '../http/respond.js';
import type { ServiceMetrics } from './registry.js';

export const METRICS_PATH = '/metrics';

export interface MetricsEndpoint {
  /** The /metrics route for the main listener: none when disabled or served on the admin listener. */
  routes: Route[];
  /** Starts the admin listener when there is one; resolves with its URL, else null. */
  listen(): Promise<string | null>;
  /** Stops the admin listener accepting (src/http/drain.ts). */
  stopAccepting(): void;
  /** Drains the admin listener as the public one drains (src/http/drain.ts): a scrape in flight is answered. */
  close(graceMs: number): Promise<void>;
}

/**
 * Compares `Authorization: Bearer <token>` with the configured token in constant time: both sides
 * are hashed first, so neither the token's bytes nor its length leak through timing.
 */
function authorizer(token: Config['metrics']['token']): (req: IncomingMessage) => void {
  if (token === undefined) return () => undefined;
  const expected = typeof token === 'string' ? sha256(token) : Buffer.from(token.sha256, 'hex');
  return (req) => {
    const header = req.headers.authorization ?? '';
    const match = /^Bearer +(\S+) *$/i.exec(header);
    if (!match || !timingSafeEqual(sha256(match[1]!), expected)) {
      throw new ServiceError('metrics_unauthorized', {
        detail: 'Send the metrics token as Authorization: Bearer <metrics.token>',
        headers: { 'www-authenticate': 'Bearer realm="metrics"' },
      });
    }
  };
}

/**
 * `listener`: the admin listener (src/config/admin.ts) that serves /metrics instead of the public
 * one, or null. `drainIdleMs`: as the public listener's (src/http/drain.ts).
 */
export function metricsEndpoint(cfg: Config['metrics'], listener: AdminListener | null, metrics: ServiceMetrics | undefined, drainIdleMs?: number): MetricsEndpoint {
  let connections: ConnectionDrain | null = null;
  if (!metrics) return { routes: [], listen: async () => null, stopAccepting: () => undefined, close: async () => undefined };
  const authorize = authorizer(cfg.token);
  const serve = async (req: IncomingMessage, res: ServerResponse, headers: Record<string, string>) => {
    authorize(req);
    sendText(res, 200, await metrics.render(), metrics.contentType, headers);
  };
  return {
    routes: listener ? [] : [{ method: 'GET', path: METRICS_PATH, group: 'health', auth: 'none', body: 'none', handle: (ctx) => serve(ctx.req, ctx.res, ctx.headers) }],
    async listen() {
      if (!listener) return null;
      const s = createServer((req, res) => {
        if (connections?.admit(req, res) === false) return;
        void answerSeparate(req, res, serve);
      });
      connections = trackConnections(s, drainIdleMs);
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.listen(listener.port, listener.host, () => resolve());
      });
      const { port, address } = s.address() as AddressInfo;
      return `http://${address.includes(':') ? `[${address}]` : address}:${port}`;
    },
    stopAccepting() {
      connections?.stopAccepting();
    },
    close(graceMs) {
      return connections ? connections.drain(graceMs) : Promise.resolve();
    },
  };
}

/** The separate listener serves /metrics only: 404 and 405 problem bodies for anything else. */
async function answerSeparate(
  req: IncomingMessage,
  res: ServerResponse,
  serve: (req: IncomingMessage, res: ServerResponse, headers: Record<string, string>) => Promise<void>,
): Promise<void> {
  try {
    const { pathname } = new URL(req.url ?? '/', 'http://localhost');
    if (pathname !== METRICS_PATH) throw new ServiceError('route_not_found');
    if (req.method !== 'GET' && req.method !== 'HEAD') throw new ServiceError('method_not_allowed', { headers: { allow: 'GET' } });
    await serve(req, res, {});
  } catch (err) {
    sendProblem(res, err);
  }
}
