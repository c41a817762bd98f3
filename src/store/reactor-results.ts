/**
 * What the token store keeps of asynchronous reactor calls (POST /reactors/{id}/react-async,
 * GET /reactors/{id}/results/{requestId}). One entry per call: its tenant, its request id, and a
 * sealed body (ciphertext from the key ring; api/reactor-results.ts decides what is inside: the
 * asking application, the state, the answer). The store never looks inside it and forgets the
 * entry at `expires_ms`.
 */

export interface StoredReactorResult {
  tenant_id: string;
  /** The request id the call was answered with (a UUID the service made). */
  id: string;
  /** Ciphertext: the store sees nothing of the application, the state or the answer. */
  sealed: string;
  /** Epoch milliseconds; the entry is missing for every read from then on. */
  expires_ms: number;
}

/** The reactor result port. Contract suite: test/store/reactor-results-contract.ts. */
export interface ReactorResultPort {
  /** Writes the entry, replacing the one of the same tenant and id (pending, then its result). */
  putReactorResult(entry: StoredReactorResult): Promise<void>;
  /** The live entry, or null when there is none or it has expired. */
  getReactorResult(tenantId: string, id: string): Promise<StoredReactorResult | null>;
  /** Deletes the entries expired at `now`; returns how many (Redis expires its keys itself: 0). */
  purgeReactorResults(now: Date): Promise<number>;
}
