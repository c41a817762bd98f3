/**
 * GET /healthz (the process is alive) and GET /readyz (the token store answers; 503 when not, and
 * 503 shutting_down from the moment a shutdown begins, so a load balancer stops sending traffic).
 */
import type { Route } from '../http/context.js';
import { sendJson } from '../http/respond.js';
import { ServiceError } from '../errors.js';
import type { Store } from '../store/types.js';
import { LOST_STORE_ADVICE } from '../store/identity.js';
import { z } from 'zod';
import { problem } from './schemas.js';

const healthz = {
  summary: 'The process is alive',
  tags: ['health'],
  responses: { 200: { description: 'Alive', body: z.object({ status: z.literal('ok') }) } },
};
// Redis: the persistence read at start and whether the config accepts losing writes (store/redis/durability.ts).
const durabilitySchema = z.object({
  appendonly: z.enum(['yes', 'no', 'unknown']),
  appendfsync: z.enum(['always', 'everysec', 'no', 'unknown']),
  accepted_loss: z.boolean(),
}).describe('Redis only: the weakest primary\'s appendonly and appendfsync at start, and store.durability: accept_loss');
const readyz = {
  summary: 'The token store answers; 503 while it does not or while the service shuts down',
  tags: ['health'],
  responses: {
    200: { description: 'Ready', body: z.object({ status: z.literal('ready'), store: z.string().describe('sqlite or redis'), durability: durabilitySchema.optional() }) },
    503: problem('Not ready (store_unavailable, shutting_down)'),
  },
};

/** What /readyz asks of the store's guard (store/identity.ts). */
export interface StoreWatch {
  readonly lost: Error | null;
  check(): Promise<void>;
}

export function healthRoutes(store: Pick<Store, 'kind' | 'ping' | 'durability'>, draining: () => boolean = () => false, watch?: StoreWatch): Route[] {
  return [
    { method: 'GET', path: '/healthz', group: 'health', auth: 'none', body: 'none', schemas: healthz, handle: async (ctx) => sendJson(ctx.res, 200, { status: 'ok' }, ctx.headers) },
    {
      method: 'GET', path: '/readyz', group: 'health', auth: 'none', body: 'none', schemas: readyz,
      handle: async (ctx) => {
        if (draining()) throw new ServiceError('shutting_down', { detail: 'The service is draining its requests before it stops' });
        try {
          await store.ping();
          // Is it still the store the service opened? (a lost store answers pings too)
          await watch?.check();
        } catch (err) {
          throw new ServiceError('store_unavailable', { cause: err });
        }
        if (watch?.lost) throw new ServiceError('store_unavailable', { cause: watch.lost, detail: `${watch.lost.message}. ${LOST_STORE_ADVICE}` });
        const durability = store.durability;
        sendJson(ctx.res, 200, { status: 'ready', store: store.kind, ...(durability ? { durability } : {}) }, ctx.headers);
      },
    },
  ];
}
