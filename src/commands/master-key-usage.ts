/**
 * The help of `tokenproxy hsm` and `tokenproxy rotate-master-key`, apart from their code
 * (commands/master-key.ts), so that the CLI's start does not load the store and crypto modules.
 */

export const MECHANISMS = ['auto', 'aes_key_wrap_pad', 'aes_key_wrap', 'aes_gcm'] as const;

export const HSM_USAGE = `tokenproxy hsm init (--config PATH | --module SO --token-label LABEL --key-label LABEL (--pin-file FILE | --pin-env VAR)) [--mechanism M]

Creates the master key on a PKCS#11 token: an AES-256 key that cannot be extracted and may only
wrap and unwrap keys (with --mechanism aes_gcm: only encrypt and decrypt). Meant for SoftHSM2 and
development; a production HSM's key is made by its own key ceremony (see the operations guide).
With --config, the module, labels, PIN and mechanism are the config's secrets.master_key. Refuses a
key label the token already holds. Prints the key's id, as it appears in every value it wraps.

Exit 0: created; 1: the module, token, PIN or key failed (the message says which); 2: usage error.

      --module SO         the vendor's PKCS#11 library
      --token-label LABEL the token (it must exist: softhsm2-util --init-token makes one)
      --key-label LABEL   the new key's label
      --pin-file FILE     a file holding the user PIN
      --pin-env VAR       the environment variable holding the user PIN
      --mechanism M       ${MECHANISMS.join(', ')} (default auto: a wrap-only key)
  -c, --config PATH       take all of the above from secrets.master_key`;

export const HSM_OPTIONS = {
  config: { type: 'string', short: 'c' }, module: { type: 'string' }, 'token-label': { type: 'string' }, 'key-label': { type: 'string' },
  'pin-file': { type: 'string' }, 'pin-env': { type: 'string' }, mechanism: { type: 'string' },
} as const;

export const ROTATE_MASTER_KEY_USAGE = `tokenproxy rotate-master-key --to CONFIG [--config PATH]

Wraps every data key of the store, and the root secret the fingerprint, search-index, cursor and
audit-anchor keys derive from, by the master key of CONFIG (an HSM key of secrets.master_key, or a
key file of secrets.master_key_file), beside their entries under the current master key (the one of
--config: TOKENPROXY_MASTER_KEY, a key file or an HSM key). Nothing is re-encrypted: tokens,
fingerprints, search indexes, cursors and audit anchors stay as they are. TOKENPROXY_MASTER_KEY is
never read as the new key. CONFIG must name the same store.

The service may run meanwhile (on the current key). A run that is interrupted (even by kill -9) goes
on where it stopped when run again. Each new entry is checked to unwrap to the same key, and the
newest tokens of each tenant are decrypted under the new key before it reports success. Then start
the service with CONFIG. The current key is needed until the command has finished. The store keeps
the entries the current key wrapped (entries are only ever added): it still opens this store, and
the backups made before, so keep it as secret as the new one, or destroy it when no backup needs it.

Exit 0: done; 1: a key, the store or the check failed (run it again: it goes on); 2: usage error.

      --to CONFIG   the config the service will run with (its secrets name the new master key)
  -c, --config PATH the current config (default: $TOKENPROXY_CONFIG, else config/tokenproxy.yaml)`;

export const ROTATE_MASTER_KEY_OPTIONS = { config: { type: 'string', short: 'c' }, to: { type: 'string' } } as const;

