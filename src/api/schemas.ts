/**
 * The zod schemas the API routes share: the problem body, token records and definitions. Routes
 * validate requests with them and the OpenAPI document (openapi.ts) is made from them. Schemas
 * with a `.meta({ id })` become named components of the document.
 */
import { z } from 'zod';
import { catalogue, type ErrorCode } from '../errors.js';
import { TOKEN_TYPE_NAMES } from '../vault/token-types.js';

const codes = Object.keys(catalogue) as [ErrorCode, ...ErrorCode[]];

/** RFC 9457 problem details, as src/errors.ts toProblem makes them. */
export const Problem = z
  .object({
    type: z.string().describe('urn:tokenproxy:problem:<code>'),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    code: z.enum(codes).describe('The stable error code (docs/api.md#errors)'),
    errors: z.record(z.string(), z.array(z.string())).optional().describe('Messages by field path, e.g. primary_card.data.number'),
    error_id: z.string().optional().describe('Names the service log line that holds what this answer leaves out (a reactor error withheld from the caller)'),
  })
  .meta({ id: 'Problem', description: 'An RFC 9457 problem body (application/problem+json)' });

/** How errors of the proxy routes are answered, so a caller can tell them from the destination's answers. */
export const ProxyError = z
  .object({ proxy_error: Problem })
  .meta({ id: 'ProxyError', description: "tokenproxy's own error on a proxy route (application/json), never the destination's" });

const TokenType = z.enum(TOKEN_TYPE_NAMES as [string, ...string[]]).describe('A token type (docs/api.md "Token types")');
const Metadata = z.record(z.string(), z.string());

/** A card as it leaves the service: masked or revealed, never with its cvc. */
const CardView = z.object({
  number: z.string(),
  expiration_month: z.number().int().optional(),
  expiration_year: z.number().int().optional(),
});

/** A bank token's data as it leaves the service: the account number masked or revealed. */
const BankView = z.object({ routing_number: z.string(), account_number: z.string() });

/** spec "Token (output record)" (src/vault/records.ts). */
export const TokenRecord = z
  .object({
    id: z.string(),
    tenant_id: z.string(),
    type: TokenType,
    containers: z.array(z.string()),
    data: z.union([z.string(), CardView, BankView]).optional().describe('By the access rule: revealed, masked or absent (redact); a token\'s value only when revealed'),
    mask: z.union([z.string(), CardView]).optional().describe("A card's masked fields (answer to one definition), or a token's mask expression"),
    metadata: Metadata.optional(),
    search_indexes: z.array(z.string()).optional(),
    fingerprint_expression: z.string().optional(),
    fingerprint: z.string().optional(),
    expires_at: z.string().optional(),
    created_by: z.string(),
    created_at: z.string(),
    modified_by: z.string().nullable().optional(),
    modified_at: z.string().optional(),
    _extras: z.object({ deduplicated: z.boolean() }).optional(),
  })
  .meta({ id: 'TokenRecord' });

const CardInput = z.object({
  number: z.string().describe('13 to 19 digits passing the Luhn check'),
  expiration_month: z.number().int().min(1).max(12).optional(),
  expiration_year: z.number().int().optional(),
  cvc: z.string().optional().describe('3 or 4 digits; never returned'),
});

/**
 * A token definition. It documents the body only: definitions are validated in
 * src/vault/definition.ts, which names every bad field of every definition of a body at once.
 */
export const TokenDefinition = z
  .object({
    type: TokenType,
    data: z.union([z.string(), CardInput, BankView]).describe('A string for the string types; a card object for type card; {routing_number, account_number} for type bank'),
    id: z.string().min(3).max(400).optional(),
    containers: z.array(z.string()).length(1).optional(),
    metadata: Metadata.optional(),
    search_indexes: z.array(z.string()).max(20).optional(),
    fingerprint_expression: z.string().optional(),
    mask: z.string().optional(),
    deduplicate_token: z.boolean().optional(),
    expires_at: z.string().optional(),
  })
  .meta({ id: 'TokenDefinition' });

/** A page of a list or a search. */
export const TokenPage = z
  .object({
    pagination: z.object({ page_size: z.number().int(), next: z.string().nullable() }),
    data: z.array(TokenRecord),
  })
  .meta({ id: 'TokenPage' });

/** An error answer a route declares as its own (the document adds the ones every route of its kind has). */
export function problem(description: string): { description: string; body: typeof Problem; contentType: string } {
  return { description, body: Problem, contentType: 'application/problem+json' };
}

/** Any JSON value (the tokenize body and answer, reactor args, a destination's answer). */
export const AnyJson = z.unknown();
