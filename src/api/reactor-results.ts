/**
 * Asynchronous reactor calls:
 *
 *   POST /reactors/{id}/react-async  checked, and its args detokenized, exactly as POST
 *     /reactors/{id}/react (api/reactors.ts prepareCall: permission, body limits, rate-limit row,
 *     detokenization rules and audit); then a pending entry is stored and the answer is 202
 *     `{"asyncReactorRequestId"}` at once. The run goes on in the background through the same
 *     runtime (the reactor's pool: its concurrency, queue and timeout) and the same answer making
 *     (runCall:'s withheld error text's creating rules, the tokenize).
 *   GET /reactors/{id}/results/{requestId}  202 while pending; then the answer the synchronous
 *     call would have had: 200 `{raw, tokens}`, or the error's status and problem body.
 *
 * Entries live in the token store (store/reactor-results.ts), always sealed with the key ring
 * (AAD: tenant and request id), so the store holds no plaintext whatever the reactor returned.
 * Only the application that asked reads its entry: any other (of any tenant) gets the same 404 as
 * an unknown id. At most MAX_RUNNING background runs per instance; beyond, 503 reactor_busy at
 * once. Shutdown waits `shutdown_grace_ms` for the runs, then records the rest as failed; a run
 * lost with its instance (kill -9) answers failed once its deadline has passed.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { Principal } from '../auth/keys.js';
import type { ReactorSummary } from '../auth/tenancy.js';
import { ServiceError, toProblem, type ErrorCode, type FieldErrors } from '../errors.js';
import type { Detokenizer } from '../detokenize/service.js';
import type { Route } from '../http/context.js';
import type { Sealer } from '../http/idempotency.js';
import { sendJson } from '../http/respond.js';
import type { RouteSchemas } from '../http/route-schema.js';
import { errorFields, type Logger } from '../log.js';
import type { ReactorRuntime } from '../reactors/runtime.js';
import type { ReactorResultPort } from '../store/reactor-results.js';
import type { TokenService } from '../vault/service.js';
import { prepareCall, reactorOf, reactSchemas, runCall } from './reactors.js';
import { AnyJson, problem } from './schemas.js';

/** Background runs one instance holds at most (each also waits in its reactor's bounded queue). */
export const MAX_RUNNING = 1000;
/**
 * How long past its reactor's own bounds (a restarting host's wait, queue wait and run, the
 * runtime's grace, the tokenize) a pending entry may stay pending before it is known lost.
 */
const LOST_AFTER_MS = 60_000;
const RESTART_WAIT_MS = 5_000;

/** What the sealed entry holds (never seen by the store). */
type Entry =
  | { v: 1; app: string; reactor: string; state: 'pending'; deadline: number }
  | { v: 1; app: string; reactor: string; state: 'done'; body: { raw: unknown; tokens: unknown } }
  | { v: 1; app: string; reactor: string; state: 'failed'; problem: { code: ErrorCode; status: number; detail: string; errors?: FieldErrors; error_id?: string } };

const aadOf = (tenantId: string, id: string): string => `reactor-result:${tenantId}:${id}`;

const notFound = () => new ServiceError('reactor_result_not_found', { detail: 'No result with this request id for this reactor and application (unknown, expired, or not yours)' });

function failedOf(err: unknown, log: Logger): Extract<Entry, { state: 'failed' }>['problem'] {
  if (!(err instanceof ServiceError)) log.error({ error: { type: err instanceof Error ? err.name : typeof err } }, 'an asynchronous reactor call failed unexpectedly');
  const p = toProblem(err);
  return { code: p.code, status: p.status, detail: p.detail, ...(p.errors ? { errors: p.errors } : {}), ...(p.error_id ? { error_id: p.error_id } : {}) };
}

interface Running {
  base: { v: 1; app: string; reactor: string };
  done: Promise<void>;
  /** Set at shutdown once the entry was written as failed: the run's own end writes nothing. */
  abandoned: boolean;
  /** The run ended and its own result is being written: shutdown waits for it instead. */
  ended: boolean;
  write: (entry: Entry) => Promise<void>;
}

export interface ReactorResultsOptions {
  store: ReactorResultPort;
  ring: Sealer;
  log: Logger;
  maxRunning?: number;
}

/** The background runs of this instance and their entries. */
export class AsyncReactorCalls {
  readonly #o: Required<ReactorResultsOptions>;
  readonly #running = new Map<string, Running>();
  #closing = false;

  constructor(opts: ReactorResultsOptions) {
    this.#o = { maxRunning: MAX_RUNNING, ...opts };
  }

  /** Runs in flight on this instance (tests, metrics). */
  get running(): number {
    return this.#running.size;
  }

  /**
   * Stores the pending entry, then starts `run` in the background and returns its request id.
   * 503 reactor_busy (nothing stored, nothing run) at MAX_RUNNING or while shutting down.
   */
  async start(p: Principal, reactor: ReactorSummary, ttlMs: number, run: () => Promise<{ raw: unknown; tokens: unknown }>): Promise<string> {
    if (this.#closing) throw new ServiceError('shutting_down');
    if (this.#running.size >= this.#o.maxRunning) {
      throw new ServiceError('reactor_busy', { detail: 'Too many asynchronous reactor calls are running on this instance', headers: { 'Retry-After': '1' } });
    }
    const id = randomUUID();
    const base = { v: 1 as const, app: p.app.id, reactor: reactor.id };
    const write = async (entry: Entry): Promise<void> => {
      await this.#o.store.putReactorResult({
        tenant_id: p.tenant.id, id, sealed: this.#o.ring.seal(JSON.stringify(entry), aadOf(p.tenant.id, id)), expires_ms: Date.now() + ttlMs,
      });
    };
    const deadline = Date.now() + RESTART_WAIT_MS + 2 * reactor.timeout_ms + LOST_AFTER_MS;
    await write({ ...base, state: 'pending', deadline });
    const entry: Running = { base, done: Promise.resolve(), abandoned: false, ended: false, write };
    entry.done = (async () => {
      let result: Entry;
      try {
        result = { ...base, state: 'done', body: await run() };
      } catch (err) {
        result = { ...base, state: 'failed', problem: failedOf(err, this.#o.log) };
      }
      if (entry.abandoned) return;
      entry.ended = true;
      await write(result).catch((err: unknown) => {
        // The entry stays pending until its deadline, then answers as lost.
        this.#o.log.error({ reactor: reactor.id, request_id: id, error: errorFields(err) ?? { type: 'unknown' } }, 'storing an asynchronous reactor result failed');
      });
    })().finally(() => this.#running.delete(id));
    this.#running.set(id, entry);
    return id;
  }

  /** The caller's entry (404 reactor_result_not_found for anything else), opened. */
  async read(p: Principal, reactorId: string, id: string): Promise<Entry> {
    const stored = await this.#o.store.getReactorResult(p.tenant.id, id);
    if (!stored) throw notFound();
    let entry: Entry;
    try {
      entry = JSON.parse(await this.#o.ring.unsealOrRefresh(stored.sealed, aadOf(p.tenant.id, id))) as Entry;
    } catch {
      throw notFound();
    }
    // Another application's, or another reactor's: as unknown (no probing of ids).
    if (entry.v !== 1 || entry.app !== p.app.id || entry.reactor !== reactorId) throw notFound();
    if (entry.state === 'pending' && Date.now() > entry.deadline && !this.#running.has(id)) {
      return {
        ...entry, state: 'failed',
        problem: { code: 'reactor_unavailable', status: 503, detail: 'The run was lost: the instance running it stopped before it finished' },
      };
    }
    return entry;
  }

  /**
   * Shutdown: new calls get 503; runs in flight get `graceMs` to finish, and those still running
   * then are stored as failed (reactor_unavailable) before the store closes.
   */
  async close(graceMs: number): Promise<void> {
    this.#closing = true;
    if (this.#running.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<void>((r) => (timer = setTimeout(r, graceMs)));
    await Promise.race([Promise.allSettled([...this.#running.values()].map((r) => r.done)), grace]);
    clearTimeout(timer);
    const left = [...this.#running.entries()];
    await Promise.allSettled(left.map(async ([id, r]) => {
      // Ended in the meantime: its own result is on its way to the store.
      if (r.ended) return r.done;
      r.abandoned = true;
      const failed = { code: 'reactor_unavailable' as const, status: 503, detail: 'The service stopped before the reactor finished' };
      try {
        await r.write({ ...r.base, state: 'failed', problem: failed });
      } catch {
        this.#o.log.warn({ request_id: id }, 'an asynchronous reactor call stopped at shutdown stays pending until its deadline');
      }
    }));
  }
}

const requestParams = z.object({ id: z.string().describe('The reactor id'), requestId: z.string().describe('The `asyncReactorRequestId` of the call') });

const asyncSchemas: RouteSchemas = {
  ...reactSchemas,
  summary: "Run one of the tenant's reactors in the background",
  description: 'Answers at once with a request id; the result is read with GET /reactors/{id}/results/{requestId} (docs/reactors.md "Asynchronous calls").',
  responses: {
    202: { description: 'The call was accepted; its result is kept for `reactors.async_result_ttl_seconds`', body: z.object({ asyncReactorRequestId: z.string() }) },
    503: problem('Too many asynchronous calls are running (reactor_busy), the service is shutting down, or a store'),
  },
};

const resultSchemas: RouteSchemas = {
  summary: 'The result of an asynchronous reactor call',
  tags: ['reactors'],
  params: requestParams,
  description: 'Only the application that made the call reads it. Its error, when the call failed, is answered with the status and problem body the synchronous call would have had.',
  responses: {
    200: { description: 'The call finished: what POST /reactors/{id}/react would have answered', body: z.object({ raw: AnyJson, tokens: AnyJson }) },
    202: {
      description: 'The call is still running',
      body: z.object({ asyncReactorRequestId: z.string(), status: z.literal('pending') }),
      headers: { 'Retry-After': { description: 'Seconds to wait before asking again' } },
    },
    402: problem('The reactor failed with this status (reactor_error)'),
    404: problem('No such result for this application (reactor_result_not_found), or no such reactor'),
    500: problem('The reactor failed (reactor_runtime_error, reactor_out_of_memory, reactor_invalid_output)'),
    503: problem('The reactor was unavailable or busy, the run was lost with its instance (reactor_unavailable), or a store'),
    504: problem('The reactor timed out (reactor_timeout)'),
  },
};

export interface AsyncRouteDeps {
  runtime: ReactorRuntime | null;
  tokens: TokenService;
  detokenizer?: Detokenizer | undefined;
  calls: AsyncReactorCalls;
  /** reactors.async_result_ttl_seconds of the model serving the request. */
  ttlMs: number;
}

export function asyncReactorRoutes(d: AsyncRouteDeps): Route[] {
  return [
    {
      method: 'POST',
      path: '/reactors/:id/react-async',
      group: 'reactor',
      auth: 'api',
      body: 'json-args',
      permission: 'reactor:invoke',
      schemas: asyncSchemas,
      check: (ctx) => {
        reactorOf(d.runtime, ctx);
      },
      handle: async (ctx) => {
        const reactor = reactorOf(d.runtime, ctx);
        // Before the answer: a refused expression or a missing right is this request's error.
        const call = await prepareCall(ctx, d.detokenizer);
        const runtime = d.runtime!;
        const id = await d.calls.start(ctx.principal, reactor, d.ttlMs, () => runCall(runtime, d.tokens, ctx, reactor, call));
        sendJson(ctx.res, 202, { asyncReactorRequestId: id }, ctx.headers);
      },
    },
    {
      method: 'GET',
      path: '/reactors/:id/results/:requestId',
      group: 'reactor',
      auth: 'api',
      body: 'none',
      permission: 'reactor:invoke',
      schemas: resultSchemas,
      handle: async (ctx) => {
        const entry = await d.calls.read(ctx.principal, ctx.params.id ?? '', ctx.params.requestId ?? '');
        switch (entry.state) {
          case 'pending':
            sendJson(ctx.res, 202, { asyncReactorRequestId: ctx.params.requestId, status: 'pending' }, { ...ctx.headers, 'Retry-After': '1' });
            return;
          case 'done':
            sendJson(ctx.res, 200, entry.body, ctx.headers);
            return;
          case 'failed': {
            const f = entry.problem;
            throw new ServiceError(f.code, { status: f.status, detail: f.detail, ...(f.errors ? { errors: f.errors } : {}), ...(f.error_id ? { errorId: f.error_id } : {}) });
          }
        }
      },
    },
  ];
}
