/**
 * Crypto failures. Messages name key ids and reasons, never key bytes, plaintext or ciphertext.
 * The pipeline maps them (http/service-error.ts): UnknownKeyError/SealedValueError → internal_error (a record the
 * service wrote cannot be opened); MasterKeyMismatchError → refuse to start.
 */

/** The store's data keys were not wrapped by this master key (or are corrupt). */
export class MasterKeyMismatchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MasterKeyMismatchError';
  }
}

/** A sealed value names a data key this ring does not hold (see KeyRing.unsealOrRefresh). */
export class UnknownKeyError extends Error {
  constructor(readonly kid: string) {
    super(`sealed value uses unknown data key ${JSON.stringify(kid)}`);
    this.name = 'UnknownKeyError';
  }
}

/** A sealed value is malformed, was tampered with, or is opened with the wrong AAD. */
export class SealedValueError extends Error {
  constructor(readonly reason: 'malformed' | 'authentication_failed') {
    super(reason === 'malformed' ? 'sealed value is malformed' : 'sealed value failed authentication (tampered or wrong context)');
    this.name = 'SealedValueError';
  }
}
