/**
 * API keys and proxy keys are held only as SHA-256 digests, built once at start-up.
 * A presented key is hashed and looked up by digest; the match is confirmed by a comparison that
 * takes the same time wherever the digests differ, so no comparison leaks how much of a key was
 * right.
 *
 * Every request pays this lookup, so it is lean: the digest is computed straight to hex (a Buffer
 * result costs an ArrayBuffer allocation, about 3x the hash itself), the principal each key
 * resolves to is built once, and the presented key is never kept. A cache of presented keys was
 * weighed and left out: it would hold plaintext keys in the heap for the life of the process
 * (where the config may hold only their digests), and a string-keyed map compares candidates
 * with an early exit; the hex digest costs about a microsecond.
 */
import { hash } from 'node:crypto';
import type { Application, ProxySummary, Tenant } from './tenancy.js';

export type KeyKind = 'test' | 'public' | 'private' | 'management';

/** Who a request is: the compiled tenant and application (src/auth/tenancy.ts), never config objects. */
export interface Principal {
  tenant: Tenant;
  app: Application;
  /** Rate-limit and log identity: a short digest of the key, never the key. */
  keyId: string;
  /** `test` when the tenant is flagged as a test tenant (spec: "test tenant key"). */
  kind: KeyKind;
}

export interface ProxyPrincipal {
  tenant: Tenant;
  proxy: ProxySummary;
  keyId: string;
}

/** One-shot SHA-256 (crypto.hash: no Hash object per call; Node >= 20.12). */
export function sha256(value: string): Buffer {
  return hash('sha256', value, 'buffer');
}

/** The identity used in logs and rate-limit counters for a key digest. */
export function keyIdOf(digest: Buffer): string {
  return digest.subarray(0, 12).toString('hex');
}

/**
 * Whether two hex digests of equal length are equal, in time independent of where they differ
 * (timingSafeEqual's contract, on strings: no Buffer per call).
 */
export function hexEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** Digest (lowercase hex) to what the key resolves to, made once per configured key. */
class DigestIndex<T> {
  private readonly byDigest = new Map<string, { digest: string; value: T }>();

  /** `make` gets the key id (the log and rate-limit identity) of the digest. */
  add(digest: Buffer, make: (keyId: string) => T): void {
    this.byDigest.set(digest.toString('hex'), { digest: digest.toString('hex'), value: make(keyIdOf(digest)) });
  }

  find(presented: string): T | null {
    const digest = hash('sha256', presented, 'hex');
    const hit = this.byDigest.get(digest);
    if (!hit || !hexEqual(hit.digest, digest)) return null;
    return hit.value;
  }
}

/**
 * Every configured key by digest, filled by the compiler (src/model/compile.ts) from digests only
 * (a key given in plaintext is hashed there first).
 */
export class KeyIndex {
  private readonly api = new DigestIndex<Principal>();
  private readonly proxy = new DigestIndex<ProxyPrincipal>();

  addApiKey(digest: Buffer, tenant: Tenant, app: Application): void {
    this.api.add(digest, (keyId) => Object.freeze({ tenant, app, keyId, kind: tenant.test ? 'test' : app.type }));
  }

  addProxyKey(digest: Buffer, tenant: Tenant, proxy: ProxySummary): void {
    this.proxy.add(digest, (keyId) => Object.freeze({ tenant, proxy, keyId }));
  }

  /** The principal of a configured key (one shared, frozen object per key), else null. */
  findApiKey(presented: string): Principal | null {
    return this.api.find(presented);
  }

  findProxyKey(presented: string): ProxyPrincipal | null {
    return this.proxy.find(presented);
  }
}
