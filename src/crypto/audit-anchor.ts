/**
 * The audit chain's anchor.
 *
 * The chain alone (store/audit.ts) shows an event removed, changed or reordered only to someone
 * who trusts the head; whoever can write the store can also rewrite the head, or recompute the
 * whole chain. So every append also stores an anchor beside the head: an HMAC-SHA256 over the
 * tenant, the head's event count and its hash, under a per-tenant key derived from the master key
 * (HKDF, as crypto/keyring.ts derives the fingerprint keys). The store never sees that key, so a
 * store writer cannot make an anchor for a head it made up: `verify-audit` recomputes it.
 *
 * What an anchor cannot show: a writer who kept an older store (an old head with its valid anchor)
 * can put it back (a rollback). The service logs each new head (`audit chain head`, formatHead)
 * so an operator can hold one outside the store and run `verify-audit --expect-head <seq>:<hash>`,
 * which fails unless the trail still passes through that head.
 */
import { createHmac, createSecretKey, hkdfSync, type KeyObject } from 'node:crypto';
import type { AuditAnchorSigner } from '../store/audit.js';

export type { AuditAnchorSigner };
// The check lives beside the chain (store/audit.ts): the stores check a head's anchor before every append.
export { anchorMatches, formatHead, parseHead } from '../store/audit.js';


/** The same salt and key length as crypto/keyring.ts, with an `info` of its own. */
const HKDF_SALT = Buffer.from('tokenproxy/v1', 'utf8');
const KEY_BYTES = 32;
/** Tenants come from config, so this bounds memory only against misuse. */
const MAX_CACHED_KEYS = 10_000;

function anchorKey(master: KeyObject, tenantId: string): KeyObject {
  const info = `tokenproxy/v1/audit-anchor\0${tenantId}`;
  if (Buffer.byteLength(info) > 1024) throw new Error('key derivation context is too long (tenant id over 1000 bytes?)');
  return createSecretKey(Buffer.from(hkdfSync('sha256', master, HKDF_SALT, info, KEY_BYTES)));
}

/** A signer under a master key (32 bytes, or the key ring's key object): per-tenant keys derived once. */
export function anchorSigner(master: Buffer | KeyObject): AuditAnchorSigner {
  const root = Buffer.isBuffer(master) ? createSecretKey(master) : master;
  const keys = new Map<string, KeyObject>();
  return (tenantId, head) => {
    let key = keys.get(tenantId);
    if (!key) {
      if (keys.size >= MAX_CACHED_KEYS) keys.clear();
      key = anchorKey(root, tenantId);
      keys.set(tenantId, key);
    }
    // Length-free: JSON of three values cannot be read two ways.
    return createHmac('sha256', key).update(JSON.stringify(['audit-anchor/v1', tenantId, head.seq, head.hash])).digest('base64url');
  };
}
