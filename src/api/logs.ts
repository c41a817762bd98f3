/**
 * GET /logs: the audit trail for management keys with log:read (docs/detokenization.md "Audit
 * trail", docs/api.md "List filters"). Filters run in the store's query, so pages are full. Two ways
 * to page: our opaque cursor (`start` = the previous page's `pagination.next`), and the
 * original's page numbers (`page=2, 3, …`, what its SDK's `logs.list` iterator sends, ending at
 * the first empty page). And GET /logs/entity-types, the SDK's logs.getEntityTypes.
 */
import { z } from 'zod';
import { ServiceError } from '../errors.js';
import type { ApiContext, ApiRoute } from '../http/context.js';
import { sendJson } from '../http/respond.js';
import { validationFailed, type InputPart, type RouteSchemas } from '../http/route-schema.js';
import type { AuditTrail } from '../audit/trail.js';
import type { AuditEvent, AuditFilter } from '../store/audit.js';
import { cursorParam, firstDecimal, firstValue, pageSizeParam, sizeInvalid } from './paging.js';

/**
 * How many matching events a page number may pass over ((page - 1) × size): the store skips them
 * inside its query, at a cost that grows with the depth; past this, page by the cursor.
 */
export const MAX_LOG_SKIP = 100_000;

const LOG_PARAMS = new Set(['entity_id', 'entity_type', 'start_date', 'end_date', 'size', 'start', 'page']);

const DATE_MESSAGE = 'must be an ISO 8601 date or time';
const isoDate = (what: string) =>
  z.preprocess(
    firstValue,
    z
      .string()
      .refine((raw) => /^\d{4}-\d{2}-\d{2}/.test(raw) && !Number.isNaN(Date.parse(raw)), DATE_MESSAGE)
      .transform((raw) => Date.parse(raw))
      .optional(),
  ).describe(`${what} (ISO 8601, inclusive)`);

const LogsQuery = z.preprocess(
  (q, ctx) => {
    for (const k of Object.keys(q as object)) {
      if (!LOG_PARAMS.has(k)) ctx.issues.push({ code: 'custom', input: q, path: [k], message: 'unknown parameter', params: { unknownParameter: true } });
    }
    return q;
  },
  z.object({
    entity_id: z.preprocess(firstValue, z.string().optional()).describe('Only events naming this token id'),
    entity_type: z.preprocess(firstValue, z.literal('token', { error: 'must be token' }).optional()).describe('token (the only entity the trail records)'),
    start_date: isoDate('Only events at or after this time'),
    end_date: isoDate('Only events at or before this time'),
    size: pageSizeParam(),
    start: cursorParam(),
    page: z.preprocess(firstDecimal, z.number({ error: 'must be a whole number from 1' }).int('must be a whole number from 1').min(1, 'must be a whole number from 1').optional())
      .describe('A page number from 1 (the original\'s paging; after `start` when both are given): passes over (page - 1) × size events'),
  }),
);

/** The answers GET /logs always gave: the unknown-parameter and size messages, invalid_cursor. */
function logsInvalid(issues: readonly z.core.$ZodIssue[], part: InputPart): ServiceError {
  if (issues.some((i) => i.code === 'custom' && i.params?.unknownParameter)) {
    return new ServiceError('validation_failed', { detail: `Unknown parameter; use ${[...LOG_PARAMS].join(', ')}` });
  }
  if (issues.some((i) => i.path[0] === 'size')) {
    return sizeInvalid();
  }
  return validationFailed(issues, part);
}

/** An event as GET /logs shows it: the original's Log fields, then ours (token_ids, destination, the chain). */
function logView(e: AuditEvent, filter: AuditFilter): Record<string, unknown> {
  return {
    id: String(e.seq),
    seq: e.seq,
    created_at: e.created_at,
    tenant_id: e.tenant_id,
    operation: e.action,
    actor_id: e.application_id,
    actor_type: 'application',
    actor: { application_id: e.application_id },
    entity_type: 'token',
    // An event may name several tokens (one detokenize); filtered by one, the entry is about that one.
    entity_id: filter.entity_id ?? e.token_ids[0] ?? null,
    token_ids: e.token_ids,
    destination: e.destination,
    request_id: e.request_id,
    prev_hash: e.prev_hash,
  };
}

const LogEntry = z.object({
  id: z.string().describe('The event\'s number in the tenant\'s chain, as a string'),
  seq: z.number().int(),
  created_at: z.string(),
  tenant_id: z.string(),
  operation: z.string().describe('token.reveal, token.detokenize, proxy.outbound, proxy.detokenize or reactor.args'),
  actor_id: z.string().describe('The application whose key asked'),
  actor_type: z.literal('application'),
  actor: z.object({ application_id: z.string() }),
  entity_type: z.literal('token'),
  entity_id: z.string().nullable().describe('The token the entry is about: the entity_id filter when given, else the first of token_ids'),
  token_ids: z.array(z.string()),
  destination: z.string().nullable(),
  request_id: z.string(),
  prev_hash: z.string(),
});

const LogPage = z
  .object({
    pagination: z.object({
      page_size: z.number().int(),
      page_number: z.number().int().optional().describe('The page asked for by number'),
      next: z.string().nullable().describe('The cursor of the next page (start=…), null on the last'),
    }),
    data: z.array(LogEntry),
  })
  .meta({ id: 'LogPage' });

const schemas: RouteSchemas = {
  summary: 'The audit trail, newest first',
  tags: ['audit'],
  query: LogsQuery,
  queryDescription: 'Page by the cursor (`start`) or by number (`page`, up to ' + MAX_LOG_SKIP.toLocaleString('en-US') + ' events deep); past the last event a page is empty.',
  invalid: logsInvalid,
  responses: { 200: { description: 'A page of audit events', body: LogPage } },
};

/** GET /logs/entity-types: what `entity_type` may be (the SDK's logs.getEntityTypes): the trail records token events only. */
const ENTITY_TYPES = [{ display_name: 'Token', value: 'token' }];
const entityTypesSchemas: RouteSchemas = {
  summary: 'The entity types of the audit trail',
  tags: ['audit'],
  responses: { 200: { description: 'Each entity_type GET /logs takes', body: z.array(z.object({ display_name: z.string(), value: z.string() })) } },
};

export function logsRoutes(audit: AuditTrail): ApiRoute[] {
  const handle = async (ctx: ApiContext) => {
    const q = ctx.query as z.output<typeof LogsQuery>;
    const filter: AuditFilter = {};
    if (q.entity_id !== undefined) filter.entity_id = q.entity_id;
    if (q.start_date !== undefined) filter.start_ms = q.start_date;
    if (q.end_date !== undefined) filter.end_ms = q.end_date;
    const skip = ((q.page ?? 1) - 1) * q.size;
    if (skip > MAX_LOG_SKIP) {
      throw new ServiceError('validation_failed', {
        detail: `page: at most ${MAX_LOG_SKIP} events deep by page number; page on with start=<pagination.next>`,
        errors: { page: [`(page - 1) × size must be at most ${MAX_LOG_SKIP}`] },
      });
    }
    // A cursor the store cannot read is 400 invalid_cursor, a failing store 503 (store/service-errors.ts).
    const page = await audit.list(ctx.principal.tenant.id, filter, { size: q.size, after: q.start, skip });
    const pagination = q.page === undefined ? { page_size: q.size, next: page.next } : { page_size: q.size, page_number: q.page, next: page.next };
    sendJson(ctx.res, 200, { pagination, data: page.items.map((e) => logView(e, filter)) }, ctx.headers);
  };
  const read = { method: 'GET', group: 'management', auth: 'api', body: 'none', kinds: ['management'], permission: 'log:read' } as const;
  return [
    { ...read, path: '/logs', schemas, handle },
    { ...read, path: '/logs/entity-types', schemas: entityTypesSchemas, handle: async (ctx) => sendJson(ctx.res, 200, ENTITY_TYPES, ctx.headers) },
  ];
}
