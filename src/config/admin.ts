/**
 * Where the admin listener is: `server.admin`, or the older spelling `metrics.port` /
 * `metrics.host` (kept working; the loader refuses both at once). Null: no admin listener, and
 * `/metrics` is served on the public listener as before.
 */
import type { Config } from './schema.js';

export interface AdminListener {
  host: string;
  port: number;
  /** Which setting named it, for messages. */
  from: 'server.admin' | 'metrics.port';
}

export function adminListener(cfg: Pick<Config, 'server' | 'metrics'>): AdminListener | null {
  if (cfg.server.admin) return { host: cfg.server.admin.host, port: cfg.server.admin.port, from: 'server.admin' };
  if (cfg.metrics.port !== undefined) return { host: cfg.metrics.host ?? cfg.server.host, port: cfg.metrics.port, from: 'metrics.port' };
  return null;
}
