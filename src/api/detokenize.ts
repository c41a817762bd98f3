/**
 * POST /detokenize (docs/detokenization.md "Detokenization"): any JSON body with expressions in, the same body
 * with values out, for keys with token:read; and GET /logs, the audit trail, for management keys
 * with log:read (docs/detokenization.md "Audit trail").
 */
import { ExpressionScan } from '../detokenize/expressions.js';
import { stringifyInTurns } from '../detokenize/serialize.js';
import type { Detokenizer } from '../detokenize/service.js';
import { ServiceError } from '../errors.js';
import type { ApiContext, Route } from '../http/context.js';
import { sendJson } from '../http/respond.js';
import type { AuditEvent, AuditFilter } from '../store/audit.js';
import type { AuditTrail } from '../audit/trail.js';
import { cursor, pageSize } from './paging.js';

/** Answers with more values than this (bytes) are serialized in turns (detokenize/serialize.ts). */
const LARGE_ANSWER = 256 * 1024;

/** An event as GET /logs shows it. */
function logView(e: AuditEvent): Record<string, unknown> {
  return {
    seq: e.seq,
    created_at: e.created_at,
    tenant_id: e.tenant_id,
    operation: e.action,
    actor: { application_id: e.application_id },
    entity_type: 'token',
    entity_id: e.token_ids[0] ?? null,
    token_ids: e.token_ids,
    destination: e.destination,
    request_id: e.request_id,
    prev_hash: e.prev_hash,
  };
}

function date(params: URLSearchParams, name: string): number | undefined {
  const raw = params.get(name);
  if (raw === null || raw === '') return undefined;
  const ms = Date.parse(raw);
  if (!/^\d{4}-\d{2}-\d{2}/.test(raw) || Number.isNaN(ms)) {
    throw new ServiceError('validation_failed', { detail: `${name} must be an ISO 8601 date or time`, errors: { [name]: ['must be an ISO 8601 date or time'] } });
  }
  return ms;
}

const LOG_PARAMS = new Set(['entity_id', 'entity_type', 'start_date', 'end_date', 'size', 'start']);

function logFilter(params: URLSearchParams): AuditFilter {
  for (const k of params.keys()) {
    if (!LOG_PARAMS.has(k)) throw new ServiceError('validation_failed', { detail: 'Unknown parameter; use entity_id, entity_type, start_date, end_date, size, start' });
  }
  const type = params.get('entity_type');
  if (type !== null && type !== '' && type !== 'token') {
    throw new ServiceError('validation_failed', { detail: 'entity_type: only token events are recorded', errors: { entity_type: ['must be token'] } });
  }
  const filter: AuditFilter = {};
  const entity = params.get('entity_id');
  if (entity !== null && entity !== '') filter.entity_id = entity;
  const start = date(params, 'start_date');
  const end = date(params, 'end_date');
  if (start !== undefined) filter.start_ms = start;
  if (end !== undefined) filter.end_ms = end;
  return filter;
}

export function detokenizeRoutes(detokenizer: Detokenizer, audit: AuditTrail): Route[] {
  const logs = async (ctx: ApiContext) => {
    const q = ctx.url.searchParams;
    const filter = logFilter(q);
    const size = pageSize(q.get('size') ?? undefined);
    // A cursor the store cannot read is 400 invalid_cursor, a failing store 503 (store/service-errors.ts).
    const page = await audit.list(ctx.principal.tenant.id, filter, { size, after: cursor(q.get('start')) });
    sendJson(ctx.res, 200, { pagination: { page_size: size, next: page.next }, data: page.items.map(logView) }, ctx.headers);
  };
  return [
    {
      // A read of the tokens it names: the same rate-limit group as GET /tokens/{id}.
      method: 'POST', path: '/detokenize', group: 'tokens.read', auth: 'api', body: 'json', permission: 'token:read',
      handle: async (ctx) => {
        const body = ctx.body;
        // One scan, one budget; the render stops at the output bound and yields (issue 23).
        const scan = new ExpressionScan().json(body);
        const resolved = await detokenizer.resolveForRead(ctx.principal, scan, { requestId: ctx.requestId, log: ctx.log });
        const rendering = await scan.render(resolved);
        const answer = rendering.json(body);
        if (rendering.renderedBytes < LARGE_ANSWER) {
          sendJson(ctx.res, 200, answer, ctx.headers);
          return;
        }
        // Up to 5 MB of values: serialized in turns and sent as it comes (chunked), not held whole.
        const res = ctx.res;
        if (res.destroyed) return;
        res.writeHead(200, { ...ctx.headers, 'content-type': 'application/json; charset=utf-8' });
        // Waits for each piece to drain: pieces written ahead pile up and go out in one long writev.
        await stringifyInTurns(answer, (piece) => {
          if (res.destroyed || res.write(piece)) return;
          return new Promise<void>((resolve) => {
            const done = () => {
              res.off('drain', done);
              res.off('close', done);
              resolve();
            };
            res.on('drain', done);
            res.on('close', done);
          });
        });
        res.end();
      },
    },
    { method: 'GET', path: '/logs', group: 'management', auth: 'api', body: 'none', kinds: ['management'], permission: 'log:read', handle: logs },
  ];
}
