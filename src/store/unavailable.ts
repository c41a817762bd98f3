/** The store failed (connection, I/O). Messages never carry values. */
export class StoreUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreUnavailableError';
  }
}

/**
 * The store is not the one the service was using: it lost its marker or its data keys, or carries
 * another store's marker (store/identity.ts). A kind of unavailability (503 store_unavailable),
 * with the cause in the message (never a value).
 */
export class StoreLostError extends StoreUnavailableError {
  constructor(message: string) {
    super(message);
    this.name = 'StoreLostError';
  }
}
