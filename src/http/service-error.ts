/**
 * What a failed request is answered with, in one place for both entries of the pipeline (issue
 * 25): a store's failure as the request path's ports map it (store/service-errors.ts: 503
 * store_unavailable, 400 invalid_cursor), a sealed value that cannot be opened (a record changed
 * underneath the service, a data key gone) as 500 internal_error with the crypto error kept as the
 * cause (logged by name, never in the body), anything else as it is.
 */
import { SealedValueError, UnknownKeyError } from '../crypto/errors.js';
import { ServiceError } from '../errors.js';
import { toServiceError } from '../store/service-errors.js';

export function asServiceError(err: unknown): unknown {
  if (err instanceof ServiceError) return err;
  if (err instanceof SealedValueError || err instanceof UnknownKeyError) return new ServiceError('internal_error', { cause: err });
  return toServiceError(err);
}
