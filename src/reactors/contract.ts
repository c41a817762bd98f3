/**
 * The reactor contract's shapes (docs/reactors.md and the inbound proxy's code transform contract) and the
 * checks on what user code hands back. Pure: no I/O, no isolated-vm.
 */
import { ServiceError } from '../errors.js';

/** What a proxy code transform receives as `req.args`. */
export interface TransformArgs {
  /** Parsed JSON when the content type is JSON, else the body as a string. */
  body: unknown;
  headers: Record<string, string | string[] | undefined>;
  method: string;
  path: string;
  query: Record<string, string | string[]>;
}

/** What a code transform must return. */
export interface TransformResult {
  body: unknown;
  headers?: Record<string, string | string[]>;
}

/** What a reactor returns to `POST /reactors/{id}/react` (both optional). */
export interface ReactorOutput {
  raw: unknown;
  tokenize: unknown;
}

export type ReactorInput = { args: unknown } | { transform: TransformArgs };

function invalid(detail: string): ServiceError {
  return new ServiceError('reactor_invalid_output', { detail: `The reactor returned an invalid result: ${detail}` });
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** RFC 9110 §5.6.2 token: what a header name may be. */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** RFC 9110 §5.5: no CR, LF or NUL in a field value (header injection). */
const BAD_VALUE = /[\r\n\0]/;

/** Checks a transform's result is `{ body, headers? }` with well-formed headers. */
export function validateTransformResult(v: unknown): TransformResult {
  if (!isPlainObject(v)) return throwInvalid('a transform must return an object { body, headers }');
  if (!Object.prototype.hasOwnProperty.call(v, 'body')) return throwInvalid('a transform must return a "body"');
  if (v.headers === undefined) return { body: v.body };
  if (!isPlainObject(v.headers)) return throwInvalid('"headers" must be an object');
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(v.headers)) {
    if (!HEADER_NAME.test(name)) return throwInvalid(`header name ${JSON.stringify(name.slice(0, 100))} is not valid`);
    const values = Array.isArray(value) ? value : [value];
    if (!values.every((x): x is string => typeof x === 'string' && !BAD_VALUE.test(x))) {
      return throwInvalid(`header ${JSON.stringify(name)} must be a string (or strings) without CR, LF or NUL`);
    }
    headers[name] = Array.isArray(value) ? (value as string[]) : (value as string);
  }
  return { body: v.body, headers };
}

/** Checks a reactor's result is `{ raw?, tokenize? }` (or nothing). */
export function validateReactorOutput(v: unknown): ReactorOutput {
  if (v === undefined || v === null) return { raw: undefined, tokenize: undefined };
  if (!isPlainObject(v)) return throwInvalid('a reactor must return an object { raw, tokenize }');
  return { raw: v.raw, tokenize: v.tokenize };
}

function throwInvalid(detail: string): never {
  throw invalid(detail);
}
