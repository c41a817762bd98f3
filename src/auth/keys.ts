/**
 * API keys and proxy keys are held only as SHA-256 digests, built once at start-up.
 * A presented key is hashed and looked up by digest; the match is confirmed with
 * timingSafeEqual, so no comparison leaks how much of a key was right.
 */
import { hash, timingSafeEqual } from 'node:crypto';
import type { ApplicationConfig, ProxyConfig, TenantConfig } from '../config/schema.js';

export type KeyKind = 'test' | 'public' | 'private' | 'management';

export interface Principal {
  tenant: TenantConfig;
  app: ApplicationConfig;
  /** Rate-limit and log identity: a short digest of the key, never the key. */
  keyId: string;
  /** `test` when the tenant is flagged as a test tenant (spec: "test tenant key"). */
  kind: KeyKind;
}

export interface ProxyPrincipal {
  tenant: TenantConfig;
  proxy: ProxyConfig;
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

class DigestIndex<T> {
  private readonly byDigest = new Map<string, { digest: Buffer; value: T }>();

  add(digest: Buffer, value: T): void {
    this.byDigest.set(digest.toString('hex'), { digest, value });
  }

  find(presented: string): { value: T; keyId: string } | null {
    const digest = sha256(presented);
    const hit = this.byDigest.get(digest.toString('hex'));
    if (!hit || !timingSafeEqual(hit.digest, digest)) return null;
    return { value: hit.value, keyId: keyIdOf(digest) };
  }
}

export class KeyIndex {
  private readonly api = new DigestIndex<{ tenant: TenantConfig; app: ApplicationConfig }>();
  private readonly proxy = new DigestIndex<{ tenant: TenantConfig; proxy: ProxyConfig }>();

  constructor(tenants: readonly TenantConfig[]) {
    for (const tenant of tenants) {
      for (const app of tenant.applications) {
        for (const k of app.keys) {
          this.api.add(typeof k === 'string' ? sha256(k) : Buffer.from(k.sha256, 'hex'), { tenant, app });
        }
      }
      for (const proxy of tenant.proxies) {
        const digest = proxy.key !== undefined ? sha256(proxy.key) : Buffer.from(proxy.key_sha256!, 'hex');
        this.proxy.add(digest, { tenant, proxy });
      }
    }
  }

  findApiKey(presented: string): Principal | null {
    const hit = this.api.find(presented);
    if (!hit) return null;
    const { tenant, app } = hit.value;
    return { tenant, app, keyId: hit.keyId, kind: tenant.test ? 'test' : app.type };
  }

  findProxyKey(presented: string): ProxyPrincipal | null {
    const hit = this.proxy.find(presented);
    return hit ? { ...hit.value, keyId: hit.keyId } : null;
  }
}
