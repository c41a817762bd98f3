/**
 * The one mapping from a reactor call's failure (as the host reports it) to a ServiceError
 * (isolated-vm's timeout, memory and throw failures are converted at this edge, nowhere else).
 */
import { randomUUID } from 'node:crypto';
import { ServiceError, type ErrorCode } from '../errors.js';
import type { Logger } from '../log.js';
import type { CallFailure } from './protocol.js';

/** A thrown object with one of these `status` values passes that status through (docs/reactors.md). */
export const PASS_THROUGH_STATUSES: ReadonlySet<number> = new Set([400, 401, 402, 403, 429, 503]);

/** What the mapping needs to know about the reactor (never its args). */
export interface FailureContext {
  timeout_ms: number;
  memory_limit_mb: number;
}

const RETRY_AFTER = { 'Retry-After': '1' };

/** An uncaught error is a 500 "Reactor Runtime Error" with `errors: {error: [message]}`. */
export function runtimeError(message: string): ServiceError {
  return new ServiceError('reactor_runtime_error', { detail: 'Reactor Runtime Error', errors: { error: [message] } });
}

export function failureToError(f: CallFailure, ctx: FailureContext): ServiceError {
  switch (f.kind) {
    case 'user_error':
      if (f.status !== undefined && PASS_THROUGH_STATUSES.has(f.status)) {
        return new ServiceError('reactor_error', {
          status: f.status,
          detail: f.message,
          errors: { error: [f.message] },
          ...(f.status === 503 || f.status === 429 ? { headers: RETRY_AFTER } : {}),
        });
      }
      return runtimeError(f.message);
    case 'timeout':
      return new ServiceError('reactor_timeout', { detail: `The reactor did not finish within ${ctx.timeout_ms} ms` });
    case 'out_of_memory':
      return new ServiceError('reactor_out_of_memory', { detail: `The reactor exceeded its memory limit of ${ctx.memory_limit_mb} MB` });
    case 'invalid_output':
      return new ServiceError('reactor_invalid_output', { detail: `The reactor returned an invalid result: ${f.message}` });
    case 'output_too_large':
      return new ServiceError('reactor_invalid_output', { detail: 'The reactor result exceeds the 5 MB output limit' });
    case 'busy':
      return new ServiceError('reactor_busy', { headers: RETRY_AFTER });
    case 'unknown_reactor':
      return new ServiceError('reactor_unavailable', { detail: 'The reactor is not loaded in the reactor host', headers: RETRY_AFTER });
    case 'internal':
      // The sandbox itself failed (not the user's code); the message is ours but stays in the log.
      return runtimeError('the reactor sandbox failed');
  }
}

/** The answers whose detail or errors may carry text written by the reactor's code. */
const USER_TEXT: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['reactor_runtime_error', 'reactor_error', 'reactor_invalid_output']);

/**
 * a reactor's own error text can hold the detokenized values it was given
 * (`throw new Error('bad card ' + JSON.stringify(req.args))`), which the caller may only use, not
 * read. Such an answer keeps its status and code but carries the catalogue's generic detail and an
 * `error_id`; the reactor's text goes to the log under the same id (card numbers scrubbed there,
 * as in every log line). Other errors (timeouts, busy, limits) carry only our own text: unchanged.
 */
export function withholdUserText(err: ServiceError, log: Logger, reactor: string, values: readonly string[] = []): ServiceError {
  if (!USER_TEXT.has(err.code)) return err;
  const errorId = randomUUID();
  // The log scrubber knows card numbers, not a cvc or a token's text: the string values the args
  // held after detokenization are cut out of the message too, longest first.
  let message = err.errors?.error?.[0] ?? err.detail ?? '';
  for (const v of [...values].sort((a, b) => b.length - a.length)) if (v.length > 0) message = message.split(v).join('[detokenized value]');
  log.warn(
    { error_id: errorId, reactor, code: err.code, status: err.status, message },
    'reactor error withheld from the answer (its args held detokenized values)',
  );
  return new ServiceError(err.code, { status: err.status, errorId, ...(err.headers ? { headers: err.headers } : {}) });
}
