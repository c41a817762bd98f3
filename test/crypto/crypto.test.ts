/**
 * The crypto layer: sealing, rotation, the master-key check, keyed digests, master-key loading.
 * Key rings run on a real EmbeddedStore in a temporary directory.
 */
import t from 'tap';
import type { Test } from 'tap';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { randomBytes } from 'node:crypto';
import { KeyRing, masterKeyId } from '../../src/crypto/keyring.js';
import { MasterKeyMismatchError, SealedValueError, UnknownKeyError } from '../../src/crypto/errors.js';
import { loadMasterKey } from '../../src/crypto/master-key.js';
import { EmbeddedStore } from '../../src/store/embedded/index.js';

function tempDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'tp-crypto-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function storeIn(t: Test, dir = tempDir(t)): EmbeddedStore {
  const store = new EmbeddedStore(join(dir, 'tokens.db'));
  t.teardown(() => store.close());
  return store;
}

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return null;
}

const AAD = '11111111-1111-4111-8111-111111111111:tok-1';

t.test('seal/unseal round trip, versioned format, random IVs', async (t) => {
  const ring = await KeyRing.open(randomBytes(32), storeIn(t).dataKeys);
  for (const plain of ['', '4242424242424242', 'ünïcødé ✓ 𝄞', JSON.stringify({ number: '4111111111111111', cvc: '123' })]) {
    t.equal(ring.unseal(ring.seal(plain, AAD), AAD), plain);
  }
  const a = ring.seal('same', AAD);
  const b = ring.seal('same', AAD);
  t.not(a, b, 'a fresh IV every time');
  t.match(a, /^v1\.k1\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]+$/);
  t.equal(KeyRing.kidOf(a), 'k1');
  t.notOk(a.includes('same'));
  // IVs come from a pool refilled every 256 seals: across several refills, none repeats and every
  // ciphertext still opens.
  const ivs = new Set<string>();
  for (let i = 0; i < 1000; i++) {
    const sealed = ring.seal(`v${i}`, AAD);
    ivs.add(sealed.split('.')[2]!);
    if (i % 97 === 0) t.equal(ring.unseal(sealed, AAD), `v${i}`);
  }
  t.equal(ivs.size, 1000, 'no IV repeats across pool refills');
});

t.test('AAD mismatch and tampering are detected', async (t) => {
  const ring = await KeyRing.open(randomBytes(32), storeIn(t).dataKeys);
  const sealed = ring.seal('4242424242424242', AAD);
  const fail = (s: string, aad = AAD) => thrown(() => ring.unseal(s, aad));
  t.match(fail(sealed, `${AAD}x`), { reason: 'authentication_failed' }, 'other token id');
  t.match(fail(sealed, '22222222-2222-4222-8222-222222222222:tok-1'), { reason: 'authentication_failed' }, 'other tenant');
  const [v, kid, iv, body] = sealed.split('.');
  const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
  t.match(fail([v, kid, iv, flip(body, 3)].join('.')), { reason: 'authentication_failed' }, 'ciphertext bit flip');
  t.match(fail([v, kid, iv, flip(body, body.length - 2)].join('.')), { reason: 'authentication_failed' }, 'tag bit flip');
  t.match(fail([v, kid, flip(iv, 0), body].join('.')), { reason: 'authentication_failed' }, 'iv change');
  t.match(fail([v, kid, iv, body.slice(0, 10)].join('.')), { reason: 'malformed' }, 'truncated below a tag');
  t.match(fail(['v2', kid, iv, body].join('.')), { reason: 'malformed' }, 'unknown version');
  t.match(fail('not sealed'), { reason: 'malformed' });
  t.ok(fail([v, 'k9', iv, body].join('.')) instanceof UnknownKeyError, 'unknown kid');
  const err = fail(sealed, 'xyzzy-context');
  t.ok(err instanceof SealedValueError);
  t.notMatch(err instanceof Error ? err.message : '', /4242|xyzzy|v1\.k1/, 'no values in the message');
});

t.test('rotation: new seals use the new key, old ciphertexts still open', async (t) => {
  const dir = tempDir(t);
  const master = randomBytes(32);
  const ring = await KeyRing.open(master, storeIn(t, dir).dataKeys);
  const old = ring.seal('old', AAD);
  t.equal(await ring.rotate(), 'k2');
  t.equal(ring.activeKid, 'k2');
  const fresh = ring.seal('new', AAD);
  t.equal(KeyRing.kidOf(fresh), 'k2');
  t.equal(ring.unseal(old, AAD), 'old');
  const reopened = await KeyRing.open(master, storeIn(t, dir).dataKeys);
  t.same(reopened.kids, ['k1', 'k2']);
  t.equal(reopened.activeKid, 'k2', 'the newest key is active after a restart');
  t.equal(reopened.unseal(old, AAD), 'old');
  t.equal(reopened.unseal(fresh, AAD), 'new');
});

t.test('a key added by another instance: unsealOrRefresh reloads the ring', async (t) => {
  const dir = tempDir(t);
  const master = randomBytes(32);
  const a = await KeyRing.open(master, storeIn(t, dir).dataKeys);
  const b = await KeyRing.open(master, storeIn(t, dir).dataKeys);
  await b.rotate();
  const sealed = b.seal('from b', AAD);
  t.ok(thrown(() => a.unseal(sealed, AAD)) instanceof UnknownKeyError);
  t.equal(await a.unsealOrRefresh(sealed, AAD), 'from b');
  t.equal(a.activeKid, 'k2');
  await t.rejects(a.unsealOrRefresh(`v1.k7.${sealed.split('.').slice(2).join('.')}`, AAD), UnknownKeyError);
});

t.test('the wrong master key is detected, with a clear message', async (t) => {
  const dir = tempDir(t);
  const right = randomBytes(32);
  await KeyRing.open(right, storeIn(t, dir).dataKeys);
  const wrong = randomBytes(32);
  const err = await KeyRing.open(wrong, storeIn(t, dir).dataKeys).then(() => null, (e: unknown) => e);
  t.ok(err instanceof MasterKeyMismatchError);
  t.match(err, { message: /the master key does not match the store/ });
  t.match(err, { message: new RegExp(masterKeyId(wrong)) }, 'names the key ids');
  t.notMatch(err instanceof Error ? err.message : '', new RegExp(`${right.toString('base64').slice(0, 8).replace(/[+/]/g, '.')}|${right.toString('hex').slice(0, 16)}`), 'never the key bytes');

  const corrupt = storeIn(t);
  const id = masterKeyId(right);
  await corrupt.dataKeys.addDataKey({ kid: 'k1', wrapped: `w1.${id}.${randomBytes(12).toString('base64url')}.${randomBytes(48).toString('base64url')}`, created_at: new Date().toISOString() });
  await t.rejects(KeyRing.open(right, corrupt.dataKeys), { name: 'MasterKeyMismatchError', message: /k1 cannot be unwrapped/ });
  await t.rejects(KeyRing.open(randomBytes(16), storeIn(t).dataKeys), { message: /32 bytes/ });
});

t.test('fingerprints and index hashes: stable per tenant, distinct across tenants, types, purposes', async (t) => {
  const dir = tempDir(t);
  const master = randomBytes(32);
  const a = await KeyRing.open(master, storeIn(t, dir).dataKeys);
  const b = await KeyRing.open(master, storeIn(t, dir).dataKeys);
  const T1 = 'tenant-1';
  const T2 = 'tenant-2';
  const fp = a.fingerprint(T1, 'card', '4242424242424242');
  t.match(fp, /^[0-9a-f]{64}$/);
  t.equal(a.fingerprint(T1, 'card', '4242424242424242'), fp, 'repeatable (cached key)');
  t.equal(b.fingerprint(T1, 'card', '4242424242424242'), fp, 'same on another instance');
  await a.rotate();
  t.equal(a.fingerprint(T1, 'card', '4242424242424242'), fp, 'rotation does not change fingerprints');
  t.not(a.fingerprint(T2, 'card', '4242424242424242'), fp, 'other tenant');
  t.not(a.fingerprint(T1, 'token', '4242424242424242'), fp, 'other type');
  t.not(a.fingerprint(T1, 'ab', 'c'), a.fingerprint(T1, 'a', 'bc'), 'type/value boundary is unambiguous');
  t.not(a.indexHash(T1, '4242'), a.fingerprint(T1, '', '4242'), 'index hashes use their own key');
  t.equal(b.indexHash(T1, '4242'), a.indexHash(T1, '4242'));
  t.not(a.indexHash(T2, '4242'), a.indexHash(T1, '4242'));
  const other = await KeyRing.open(randomBytes(32), storeIn(t).dataKeys);
  t.not(other.fingerprint(T1, 'card', '4242424242424242'), fp, 'other master key');
});

t.test('a key ring prints no key material', async (t) => {
  const master = randomBytes(32);
  const ring = await KeyRing.open(master, storeIn(t).dataKeys);
  const shown = `${inspect(ring, { depth: 10, showHidden: true })}${JSON.stringify(ring)}`;
  t.match(shown, /activeKid/);
  t.notOk(shown.includes(master.toString('base64')) || shown.includes(master.toString('hex')));
});

t.test('master key loading', async (t) => {
  const key = randomBytes(32);
  const b64 = key.toString('base64');
  const warnings: string[] = [];
  const base = { storeKind: 'redis' as const, dataDir: '/nonexistent', warn: (m: string) => warnings.push(m) };

  t.same(loadMasterKey({ ...base, fromEnv: `  ${b64}\n` }), key, 'env, whitespace tolerated');
  t.same(loadMasterKey({ ...base, fromEnv: key.toString('base64url') }), key, 'base64url accepted');
  for (const bad of ['not base64 !!', randomBytes(16).toString('base64'), randomBytes(33).toString('base64'), '', Buffer.alloc(32).toString('base64')]) {
    const err = thrown(() => loadMasterKey({ ...base, fromEnv: bad }));
    t.match(err, { message: /TOKENPROXY_MASTER_KEY/ }, `rejects ${bad.length} chars`);
    if (bad.trim()) t.notOk(err instanceof Error && err.message.includes(bad.trim()), 'never echoes the value');
  }

  const dir = tempDir(t);
  const textFile = join(dir, 'key.b64');
  writeFileSync(textFile, `${b64}\n`, { mode: 0o600 });
  chmodSync(textFile, 0o600);
  t.same(loadMasterKey({ ...base, file: textFile }), key, 'base64 key file');
  t.same(loadMasterKey({ ...base, fromEnv: randomBytes(32).toString('base64'), file: textFile }).equals(key), false, 'env wins over file');
  const rawFile = join(dir, 'key.bin');
  writeFileSync(rawFile, key, { mode: 0o600 });
  chmodSync(rawFile, 0o600);
  t.same(loadMasterKey({ ...base, file: rawFile }), key, 'raw 32-byte key file');
  t.same(warnings, [], 'a 0600 file draws no warning');
  chmodSync(rawFile, 0o644);
  t.same(loadMasterKey({ ...base, file: rawFile }), key);
  t.match(warnings, [/accessible by group or others \(mode 644\); chmod 600/]);
  t.throws(() => loadMasterKey({ ...base, file: join(dir, 'missing') }), { message: /cannot read master key file .*missing \(ENOENT\)/ });
  const shortFile = join(dir, 'short');
  writeFileSync(shortFile, randomBytes(16).toString('base64'), { mode: 0o600 });
  t.throws(() => loadMasterKey({ ...base, file: shortFile }), { message: /exactly 32 bytes, it decodes to 16/ });
  t.throws(() => loadMasterKey({ ...base, storeKind: 'embedded', file: join(dir, 'missing') }), /ENOENT/, 'a named file never falls back to a dev key');

  t.throws(() => loadMasterKey(base), { message: /a master key is required with the Redis store/ });
});

t.test('development key: created 0600 once, reused, warned about', async (t) => {
  const dataDir = join(tempDir(t), 'data', 'nested');
  const warnings: string[] = [];
  const opts = { storeKind: 'embedded' as const, dataDir, warn: (m: string) => warnings.push(m) };
  const first = loadMasterKey(opts);
  t.equal(first.length, 32);
  const path = join(dataDir, 'master.key');
  t.equal(statSync(path).mode & 0o777, 0o600, 'mode 0600');
  t.same(Buffer.from(readFileSync(path, 'utf8').trim(), 'base64'), first, 'base64 on disk');
  t.equal(warnings.length, 1, 'warned once');
  t.match(warnings[0], /created a DEVELOPMENT master key at .*master\.key/);
  t.notOk(warnings[0].includes(first.toString('base64')), 'the warning does not show the key');
  const second = loadMasterKey(opts);
  t.same(second, first, 'reused');
  t.equal(warnings.length, 2);
  t.match(warnings[1], /using a DEVELOPMENT master key/);
  t.same(readdirSync(dataDir), ['master.key'], 'no temporary files left behind');
});
