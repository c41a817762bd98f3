/**
 * The help text of `tokenproxy store copy`, apart from the command itself so
 * src/cli.ts can show it without loading the stores.
 */
export const DEFAULT_BATCH = 500;
export const MAX_BATCH = 5000;

export const STORE_COPY_USAGE = `tokenproxy store copy --from CONFIG --to CONFIG [--batch N]

Copies every tenant's tokens, the data key ring and the audit trails from the store of one config
(--from) to the store of another (--to): embedded, Redis or PostgreSQL, in any direction. Nothing is
decrypted: ciphertext and wrapped data keys move as they are, so both configs must use the same
master key (checked). Stop the source's service first (its writes after the copy began are not
copied), and start a service on the target only after the copy: the target must be empty, or
hold an earlier, interrupted copy of the same source, which the run goes on from (re-running is
safe: nothing is written twice). A target holding a data key ring, tokens or an audit trail of its
own is refused before anything is written.

Copied: the live tokens of every tenant of the --from config, oldest first (expired tokens are
unreadable on every store and are left out); the data keys, with the same kids; each tenant's
audit trail with its chain and anchored head (tokenproxy verify-audit passes on the target).
Not copied: idempotency entries (they live 24 hours: a client retrying across the move is served
as a new request). At the end the token counts of every tenant are compared, and a sample of
tokens is read from both stores and compared field by field, byte for byte.

Exit 0: copied and verified; 1: the copy failed or was refused (the reason is printed; run it again
once fixed); 2: usage error (a missing option, a bad --batch, a tenant of --from missing from --to,
both configs naming the same store).

      --from CONFIG   the config whose store is read (the current one)
      --to CONFIG     the config whose store is written (the new one)
      --batch N       tokens and audit events per atomic write (default ${DEFAULT_BATCH}, at most ${MAX_BATCH})`;
