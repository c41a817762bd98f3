/**
 * The Redis store's idempotency entries (store/idempotency.ts): one hash per slot,
 * `P t:{T}:idem:<key digest>` {s: state, o: owner, v: sealed} (the tenant's hash tag: on a Redis
 * Cluster, the same slot as the tenant's other keys), expiring by itself (PEXPIRE), so an
 * in-flight claim of a crashed instance goes away after its short TTL and an answer after 24 h.
 * Each op is one script: the check and the write are atomic across every instance on the server.
 */

/** KEYS[1] the slot; ARGV owner, sealed, ttl ms. Answers {state, sealed} of a live entry, or {'claimed'}. */
export const CLAIM = `
local cur = redis.call('HMGET', KEYS[1], 's', 'v')
if cur[1] then return {cur[1], cur[2]} end
redis.call('HSET', KEYS[1], 's', 'in_flight', 'o', ARGV[1], 'v', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'claimed'}`;

/** KEYS[1] the slot; ARGV owner, sealed, ttl ms. 1 when the owner's in-flight entry became done. */
export const COMPLETE = `
local cur = redis.call('HMGET', KEYS[1], 's', 'o')
if cur[1] ~= 'in_flight' or cur[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 's', 'done', 'v', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`;

/** KEYS[1] the slot; ARGV owner. 1 when the owner's in-flight entry was deleted. */
export const RELEASE = `
local cur = redis.call('HMGET', KEYS[1], 's', 'o')
if cur[1] ~= 'in_flight' or cur[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1`;
