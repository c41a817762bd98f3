/**
 * What a route declares about its requests and responses, as zod schemas. The pipeline validates
 * path parameters, the query and (when `body.validate` is not false) the JSON body with them
 * before the handler sees them, and src/api/openapi.ts turns the same schemas into the OpenAPI
 * document: one source for both. A route without schemas still works and is still listed.
 */
import { z } from 'zod';
import { ServiceError, type FieldErrors } from '../errors.js';
import { LargeJsonBody, ReactorArgsJson } from './large-json.js';

export interface ResponseSpec {
  description: string;
  /** The body's schema; omitted for an empty body. */
  body?: z.ZodType;
  /** Default application/json. */
  contentType?: string;
  /** Response headers beyond the ones every answer carries, by name → description. */
  headers?: Record<string, { description: string; required?: boolean; schema?: z.ZodType }>;
}

export interface BodySpec {
  schema: z.ZodType;
  /** Media types accepted; default application/json (and any application/*+json). */
  mediaTypes?: readonly string[];
  /**
   * false: the schema only describes the body, the handler validates it with its own codes (the
   * token definitions of /tokenize, /tokens and PATCH /tokens/{id}: src/vault/definition.ts).
   */
  validate?: boolean;
  description?: string;
}

export type InputPart = 'params' | 'query' | 'body';

export interface RouteSchemas {
  summary: string;
  description?: string;
  tags?: readonly string[];
  /** Path parameters by name (values are URL-decoded strings). */
  params?: z.ZodObject;
  /**
   * Query parameters: a parameter given once is a string, given twice or more an array of strings.
   * An object schema, or a pipe ending in one (z.preprocess): the document names its members.
   */
  query?: z.ZodType<Record<string, unknown>>;
  /** Text for query parameters the object's shape cannot name (e.g. `metadata.<key>`). */
  queryDescription?: string;
  body?: BodySpec;
  /**
   * Request headers of this route (e.g. an idempotency key), by name. Described in the document
   * only: the handler reads and checks them, with its own error codes.
   */
  requestHeaders?: Record<string, { description: string; required?: boolean; schema?: z.ZodType }>;
  /** Answers by status (or range, `4XX`); the error statuses every route of its kind can answer are added by the document. */
  responses: Partial<Record<number | `${1 | 2 | 3 | 4 | 5}XX`, ResponseSpec>>;
  /**
   * The error for a validation failure. Default: 400 validation_failed with the messages by field
   * path (`errors`). A route whose clients key on an older shape maps the issues itself.
   */
  invalid?: (issues: readonly z.core.$ZodIssue[], part: InputPart) => ServiceError;
}

/** The query as the schemas see it: one value a string, repeated values an array. */
export function queryObject(params: URLSearchParams): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = Object.create(null) as Record<string, string | string[]>;
  for (const [k, v] of params) {
    const prev = out[k];
    out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return { ...out };
}

/** The default error: validation_failed, messages by dotted field path (never a value). */
export function validationFailed(issues: readonly z.core.$ZodIssue[], part: InputPart): ServiceError {
  const errors: FieldErrors = {};
  for (const issue of issues) {
    const keys = issue.code === 'unrecognized_keys' ? issue.keys.map((k) => [...issue.path, k]) : [issue.path];
    for (const path of keys) {
      const field = path.length ? path.map(String).join('.') : part;
      (errors[field] ??= []).push(issue.code === 'unrecognized_keys' ? 'unknown field' : issue.message);
    }
  }
  return new ServiceError('validation_failed', { detail: `The request ${part === 'params' ? 'path' : part} failed validation`, errors });
}

/** Parses `value` with `schema`, or throws the route's error for the issues. */
export function parseInput<T>(schemas: RouteSchemas, part: InputPart, schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  throw (schemas.invalid ?? validationFailed)(r.error.issues, part);
}

/**
 * Validates a body that readJson returned. Bodies parsed in the JSON worker (over 64 KiB) arrive
 * checked there and are passed on as they are.
 */
export function parseBody(schemas: RouteSchemas | undefined, body: unknown): unknown {
  const spec = schemas?.body;
  if (!spec || spec.validate === false) return body;
  if (body instanceof LargeJsonBody || body instanceof ReactorArgsJson) return body;
  return parseInput(schemas, 'body', spec.schema, body);
}
