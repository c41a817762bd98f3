/**
 * What the token store keeps for idempotent requests (SVC-IDEMPOTENCY-KEY, src/http/idempotency.ts).
 * One entry per slot: a tenant and a digest of the application and the client's key (the key
 * itself is never stored). The store sees only ciphertext (`sealed`, from the key ring) and the
 * opaque `owner` of an in-flight claim; it never looks inside either.
 */

export interface IdempotencySlot {
  tenant_id: string;
  /** A digest naming the application and the client's idempotency key. */
  key: string;
}

/** What a claim found: the slot is now the caller's (`claimed`), or another request's entry. */
export type IdempotencyClaim =
  | { state: 'claimed' }
  /** Another request holds the slot and has not answered yet (or crashed: the entry expires). */
  | { state: 'in_flight'; sealed: string }
  /** A request answered successfully; `sealed` holds that answer. */
  | { state: 'done'; sealed: string };

/** The idempotency port. Contract suite: test/store/idempotency-contract.ts. */
export interface IdempotencyPort {
  /**
   * One atomic step (across every instance sharing the store): when the slot holds a live entry
   * (in flight or done), answers it and writes nothing; else writes an in-flight entry of
   * `owner` holding `sealed`, live for `ttlMs`, and answers `claimed`.
   */
  claimIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<IdempotencyClaim>;
  /**
   * The owner's in-flight entry becomes done, holding `sealed`, live for `ttlMs`. False (nothing
   * written) when the slot no longer holds this owner's in-flight entry (it expired, and maybe
   * another request claimed it).
   */
  completeIdempotencyKey(slot: IdempotencySlot, owner: string, sealed: string, ttlMs: number): Promise<boolean>;
  /** Deletes the owner's in-flight entry (its request failed); false when it holds none. */
  releaseIdempotencyKey(slot: IdempotencySlot, owner: string): Promise<boolean>;
  /** Deletes the entries expired at `now`; returns how many (Redis expires its keys itself: 0). */
  purgeIdempotencyKeys(now: Date): Promise<number>;
}
