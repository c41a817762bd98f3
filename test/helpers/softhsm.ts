/**
 * SoftHSM2 for a test: a token directory of its own (SOFTHSM2_CONF pointing at a config file
 * that names it), one token initialized with a random user PIN, and the environment a child
 * process needs to see it. The master key on it is made by the real CLI (`tokenproxy hsm init`).
 *
 * TOKENPROXY_REQUIRE_HSM=1 (set by .ci/run): a missing SoftHSM2 or pkcs11js fails instead of skipping.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { runCli } from './process.js';

export const SOFTHSM_MODULE = ['/usr/lib/softhsm/libsofthsm2.so', '/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so', '/usr/local/lib/softhsm/libsofthsm2.so']
  .find((p) => existsSync(p)) ?? '/usr/lib/softhsm/libsofthsm2.so';

/** The reason to skip HSM tests, or false to run them. Throws when the HSM is required but missing. */
export function softhsmSkip(): string | false {
  let reason: string | null = null;
  if (spawnSync('softhsm2-util', ['--version']).status !== 0) reason = 'softhsm2-util is not installed (apt-get install softhsm2)';
  else if (!existsSync(SOFTHSM_MODULE)) reason = `the SoftHSM2 module ${SOFTHSM_MODULE} is missing`;
  else {
    try {
      createRequire(import.meta.url)('pkcs11js');
    } catch {
      reason = 'the optional package pkcs11js is not installed or did not build';
    }
  }
  if (reason === null) return false;
  if (process.env.TOKENPROXY_REQUIRE_HSM === '1') throw new Error(`${reason}; required by TOKENPROXY_REQUIRE_HSM=1`);
  return reason;
}

export interface SoftHsm {
  /** The environment a child needs to see this token directory (and nothing else of the test's). */
  env: Record<string, string>;
  module: string;
  tokenLabel: string;
  /** The user PIN (random: an output scan can only find it if it leaked). */
  pin: string;
  /** A 0600 file holding the PIN and a newline. */
  pinFile: string;
  /** `secrets.master_key` for a key of this token. */
  masterKey(keyLabel: string, extra?: Record<string, unknown>): Record<string, unknown>;
  /** `tokenproxy hsm init` for a key of this token; the CLI's exit code and output. */
  initKey(keyLabel: string, mechanism?: string): Promise<{ code: number | null; output: string }>;
}

/** A token directory under `dir` with one initialized token. */
export function softHsm(dir: string, tokenLabel = 'tokenproxy-test'): SoftHsm {
  const tokens = join(dir, 'softhsm-tokens');
  mkdirSync(tokens, { recursive: true, mode: 0o700 });
  const conf = join(dir, 'softhsm2.conf');
  writeFileSync(conf, `directories.tokendir = ${tokens}\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n`);
  const env = { SOFTHSM2_CONF: conf };
  const pin = `pin${randomBytes(6).toString('hex')}`;
  const soPin = `so${randomBytes(6).toString('hex')}`;
  const init = spawnSync('softhsm2-util', ['--init-token', '--free', '--label', tokenLabel, '--pin', pin, '--so-pin', soPin], { env: { ...process.env, ...env }, encoding: 'utf8' });
  if (init.status !== 0) throw new Error(`softhsm2-util --init-token failed: ${init.stderr}${init.stdout}`);
  const pinFile = join(dir, 'hsm.pin');
  writeFileSync(pinFile, `${pin}\n`, { mode: 0o600 });
  return {
    env,
    module: SOFTHSM_MODULE,
    tokenLabel,
    pin,
    pinFile,
    masterKey: (keyLabel, extra = {}) => ({ kind: 'pkcs11', module: SOFTHSM_MODULE, token_label: tokenLabel, key_label: keyLabel, pin_file: pinFile, ...extra }),
    initKey: (keyLabel, mechanism) => runCli(
      ['hsm', 'init', '--module', SOFTHSM_MODULE, '--token-label', tokenLabel, '--key-label', keyLabel, '--pin-file', pinFile, ...(mechanism ? ['--mechanism', mechanism] : [])],
      env,
    ),
  };
}
