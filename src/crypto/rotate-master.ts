/**
 * Moving a store to another master key (`tokenproxy rotate-master-key`): every data key and the
 * root secret are unwrapped by the current master key and wrapped anew by the new one, each
 * written as a ring entry of its own (`<kid>@<new key id>`, crypto/keyring.ts). Nothing is
 * re-encrypted: the tokens keep their ciphertext, the fingerprints, search indexes, cursors and
 * audit anchors keep their keys.
 *
 * Entries are only added, each in one write that the store keeps once (addDataKey), so a run
 * killed at any point goes on where it stood when run again, and a service running on the current
 * key meanwhile is not disturbed (it keeps taking the entries its key wrapped). A key the running
 * service adds meanwhile is picked up: the ring is read again until every key has its new entry.
 */
import { timingSafeEqual } from 'node:crypto';
import type { DataKeyPort } from '../store/types.js';
import type { KeyEncryptionKey } from './kek.js';
import { wrappedBy } from './kek.js';
import { copyKid, groupEntries, ROOT_KID, vaultRoot } from './keyring.js';

export interface RewrapProgress {
  kid: string;
  /** false: the entry was there already (an earlier, interrupted run wrote it). */
  written: boolean;
}

export interface RewrapResult {
  /** Data keys (the root apart) the new master key now wraps. */
  keys: number;
  written: number;
  /** Whether the store keeps a root secret entry for the new key (false: the new raw key is the root itself). */
  root: boolean;
}

/** The new master key must differ, and each new entry unwraps to the bytes the current one does. */
export async function rewrapRing(from: KeyEncryptionKey, to: KeyEncryptionKey, store: DataKeyPort, progress: (p: RewrapProgress) => void = () => {}): Promise<RewrapResult> {
  if (from.id === to.id) throw new Error(`the new master key is the current one (id ${to.id}): nothing to rotate`);
  let written = 0;
  let rootEntry = false;
  // Re-read until a pass adds nothing: a service on the current key may add a data key meanwhile.
  for (let pass = 0; pass < 10; pass++) {
    const entries = await store.listDataKeys();
    const { root, keys } = groupEntries(entries);
    if (keys.size === 0) throw new Error('the store holds no data keys: no tokenproxy service has used it');
    let added = 0;
    const secret = await vaultRoot(from, store, { create: false, entries });
    try {
      const toRaw = to.rawRoot();
      // A raw new key that is the root itself (back to the key the store was made with) needs no entry.
      const isOwnRoot = toRaw !== null && toRaw.length === secret.length && timingSafeEqual(toRaw, secret);
      toRaw?.fill(0);
      const existing = root.find((e) => wrappedBy(e.wrapped) === to.id);
      if (existing) {
        check(to, ROOT_KID, existing.wrapped, secret);
        if (pass === 0) progress({ kid: ROOT_KID, written: false });
        rootEntry = true;
      } else if (!isOwnRoot) {
        await add(store, to, ROOT_KID, secret);
        progress({ kid: ROOT_KID, written: true });
        rootEntry = true;
        added++;
      }
    } finally {
      secret.fill(0);
    }
    for (const [kid, list] of keys) {
      const mine = list.find((e) => wrappedBy(e.wrapped) === from.id);
      const theirs = list.find((e) => wrappedBy(e.wrapped) === to.id);
      if (!mine) {
        if (theirs) continue;
        throw new Error(`data key ${kid} is wrapped by master key ${wrappedBy(list[0]!.wrapped) ?? '(unknown)'} only, neither by the current master key ${from.id} nor by the new one ${to.id}`);
      }
      const plain = from.unwrap(kid, mine.wrapped);
      try {
        if (theirs) {
          check(to, kid, theirs.wrapped, plain);
          if (pass === 0) progress({ kid, written: false });
          continue;
        }
        await add(store, to, kid, plain);
        progress({ kid, written: true });
        written++;
        added++;
      } finally {
        plain.fill(0);
      }
    }
    if (added === 0) return { keys: keys.size, written, root: rootEntry };
  }
  throw new Error('the data key ring kept changing while it was rewrapped (a data key rotation running in a loop?): run the command again');
}

async function add(store: DataKeyPort, to: KeyEncryptionKey, kid: string, plain: Buffer): Promise<void> {
  const entryKid = copyKid(kid, to.id);
  const after = await store.addDataKey({ kid: entryKid, wrapped: to.wrap(kid, plain), created_at: new Date().toISOString() });
  // Another run may have written it first (the store keeps the first): whichever it is must open to the same key.
  const kept = after.find((e) => e.kid === entryKid);
  if (!kept) throw new Error(`the store did not keep the entry ${entryKid}`);
  check(to, kid, kept.wrapped, plain);
}

/** The entry unwraps, under the new key, to the bytes the current key gives. */
function check(to: KeyEncryptionKey, kid: string, wrapped: string, expected: Buffer): void {
  const got = to.unwrap(kid, wrapped);
  try {
    if (got.length !== expected.length || !timingSafeEqual(got, expected)) {
      throw new Error(`the entry of ${kid} under the new master key ${to.id} does not unwrap to the key the current master key gives`);
    }
  } finally {
    got.fill(0);
  }
}
