/**
 * The error catalogue: every error the service can answer with, by stable code.
 * Codes are append-only (clients key on them); docs/api.md's "Errors" table is checked against this
 * object by test/docs/docs.test.ts.
 */
export const catalogue = {
  // request shape
  invalid_json: { status: 400, title: 'Request body is not valid JSON' },
  validation_failed: { status: 400, title: 'The request failed validation' },
  too_many_tokens: { status: 400, title: 'Too many tokens in one request' },
  nesting_too_deep: { status: 400, title: 'Request body is nested too deeply' },
  invalid_query: { status: 400, title: 'The search query is invalid' },
  invalid_cursor: { status: 400, title: 'The pagination cursor is invalid' },
  body_too_large: { status: 413, title: 'Request body is too large' },
  unsupported_media_type: { status: 415, title: 'Unsupported content type' },
  // a dot segment (`..`, `%2e%2e`) in the path: routed as sent, never resolved to another route
  invalid_path: { status: 400, title: 'The request path is not allowed' },
  // auth
  missing_api_key: { status: 401, title: 'An API key is required' },
  invalid_api_key: { status: 401, title: 'The API key is not valid' },
  forbidden: { status: 403, title: 'The key lacks the permission for this operation' },
  // resources
  not_found: { status: 404, title: 'Not found' },
  route_not_found: { status: 404, title: 'No such route' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  token_conflict: { status: 409, title: 'A token with this id already exists' },
  // idempotency (SVC-IDEMPOTENCY-KEY)
  invalid_idempotency_key: { status: 400, title: 'The idempotency key is not valid' },
  idempotency_key_in_flight: { status: 409, title: 'A request with this idempotency key is in progress' },
  idempotency_key_reused: { status: 422, title: 'The idempotency key was used with a different request' },
  // rate limits
  rate_limited: { status: 429, title: 'The request has been rate limited' },
  rate_limit_unavailable: { status: 503, title: 'The rate-limit store is unavailable' },
  // reactors
  reactor_runtime_error: { status: 500, title: 'Reactor Runtime Error' },
  reactor_error: { status: 400, title: 'The reactor rejected the request' },
  reactor_timeout: { status: 504, title: 'The reactor timed out' },
  reactor_out_of_memory: { status: 500, title: 'The reactor ran out of memory' },
  reactor_unavailable: { status: 503, title: 'The reactor host is unavailable' },
  reactor_busy: { status: 503, title: 'The reactor is at its concurrency limit' },
  reactor_invalid_output: { status: 500, title: 'The reactor returned an invalid result' },
  // inbound proxy
  missing_proxy_key: { status: 401, title: 'A proxy key is required' },
  invalid_proxy_key: { status: 401, title: 'The proxy key is not valid' },
  invalid_proxy_path: { status: 400, title: 'The proxy path is not allowed' },
  upgrade_not_allowed: { status: 400, title: 'This proxy does not accept protocol upgrades' },
  leak_detected: { status: 422, title: 'A card number would have left in plaintext' },
  destination_unreachable: { status: 502, title: 'The destination could not be reached' },
  destination_timeout: { status: 504, title: 'The destination did not answer in time' },
  destination_response_untransformable: { status: 502, title: 'The destination response cannot be transformed' },
  unsupported_transfer_encoding: { status: 501, title: 'The request transfer coding is not supported' },
  // detokenization (docs/detokenization.md "Detokenization")
  invalid_expression: { status: 400, title: 'A detokenization expression is invalid' },
  unknown_filter: { status: 400, title: 'A detokenization expression uses an unknown filter' },
  too_many_expressions: { status: 400, title: 'Too many detokenization expressions in one request' },
  unknown_token: { status: 400, title: 'An expression names no usable token' },
  // the values of one request add up to at most 5 MB (a key with reveal on every token)
  detokenized_output_too_large: { status: 413, title: 'The detokenized values of the request are too large' },
  // a key without reveal learns nothing of why (which filter, which header, the bound)
  detokenized_value_refused: { status: 422, title: 'The values named in the request cannot be put into it' },
  // outbound proxy
  invalid_proxy_url: { status: 400, title: 'The SVC-PROXY-URL header is not a valid destination' },
  destination_not_allowed: { status: 403, title: 'The destination is not on the outbound allow-list' },
  destination_address_refused: { status: 403, title: 'The destination resolves to an address that is refused' },
  destination_unresolvable: { status: 502, title: 'The destination host name could not be resolved' },
  // service
  store_unavailable: { status: 503, title: 'The token store is unavailable' },
  internal_error: { status: 500, title: 'Internal error' },
  shutting_down: { status: 503, title: 'The service is shutting down' },
  // metrics
  metrics_unauthorized: { status: 401, title: 'The metrics bearer token is missing or wrong' },
  // a public key used from a page whose origin its application does not list
  origin_not_allowed: { status: 403, title: "The page's origin may not use this key" },
  // applications, proxies and reactors are written in the configuration file, never over the API
  managed_by_config: { status: 405, title: 'This resource is managed in the configuration file' },
  // an asynchronous reactor call's result that is unknown, expired, or another application's
  reactor_result_not_found: { status: 404, title: 'No reactor result with this request id' },
  // a key that may not compute on a value (it did not send it in the clear) sent a template over it
  expression_not_allowed: { status: 403, title: 'This key may not send expressions over these values' },
} as const satisfies Record<string, { status: number; title: string }>;

export type ErrorCode = keyof typeof catalogue;

/** Field path → messages, for validation failures (e.g. `primary_card.data.number`). */
export type FieldErrors = Record<string, string[]>;

/**
 * Records `message` under `path`. Own members only: a path named after an Object.prototype
 * member (`constructor`, `__proto__`, `toString`) is an ordinary path, not a crash.
 */
export function addFieldError(errors: FieldErrors, path: string, message: string): void {
  if (Object.hasOwn(errors, path)) errors[path]!.push(message);
  else Object.defineProperty(errors, path, { value: [message], enumerable: true, writable: true, configurable: true });
}

export interface ServiceErrorOptions {
  detail?: string;
  errors?: FieldErrors;
  /** Response headers that belong to this error (e.g. Retry-After on a 429). */
  headers?: Record<string, string>;
  /** Overrides the catalogue status (reactor errors that pass a user status through). */
  status?: number;
  cause?: unknown;
  /**
   * Names a log line that holds what this answer leaves out (`error_id` in the problem body), e.g.
   * a reactor's own error message withheld from a caller who used a token it may not read.
   */
  errorId?: string;
}

/**
 * The one error class. `detail` and `errors` go to the client: never put a request value,
 * a cause message of a dependency, or an upstream body in them.
 */
export class ServiceError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly title: string;
  readonly detail: string | undefined;
  readonly errors: FieldErrors | undefined;
  readonly headers: Record<string, string> | undefined;
  readonly errorId: string | undefined;

  constructor(code: ErrorCode, opts: ServiceErrorOptions = {}) {
    super(opts.detail ?? catalogue[code].title, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'ServiceError';
    this.code = code;
    this.status = opts.status ?? catalogue[code].status;
    this.title = catalogue[code].title;
    this.detail = opts.detail;
    this.errors = opts.errors;
    this.headers = opts.headers;
    this.errorId = opts.errorId;
  }
}

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: ErrorCode;
  errors?: FieldErrors;
  error_id?: string;
}

/** RFC 9457 problem details for an error; unknown errors become a bare 500. */
export function toProblem(err: unknown): ProblemBody {
  const e = err instanceof ServiceError ? err : new ServiceError('internal_error');
  const body: ProblemBody = {
    type: `urn:tokenproxy:problem:${e.code}`,
    title: e.title,
    status: e.status,
    detail: e.detail ?? e.title,
    code: e.code,
  };
  if (e.errors) body.errors = e.errors;
  if (e.errorId !== undefined) body.error_id = e.errorId;
  return body;
}

export function isServiceError(err: unknown): err is ServiceError {
  return err instanceof ServiceError;
}
