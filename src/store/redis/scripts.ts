/**
 * Layout 4's token scripts (index.ts has the layout; record.ts the record's bytes). Every write is
 * one script, so a batch and its index entries appear at once. Records, ids and fingerprints are
 * binary: replies are read as Buffers (RedisConnection.evalBuffer).
 */

/**
 * Helpers: the record header's fields (record.ts), the fingerprint hash's packed id lists, a
 * container's order buckets (`<dir>:<seq div 128>`, zsets of at most 128 ids, which Redis keeps as
 * compact listpacks, and `<dir>` the zset of its non-empty bucket numbers); the cvc due times in
 * buckets of the same sequence numbers (`<due>:<seq div 128>`, id → ms), `<due>` holding each
 * bucket's earliest.
 */
const LIB = `
local function u48(s, i)
  local a, b, c, d, e, f = string.byte(s, i, i + 5)
  return ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
end
local function w48(n)
  local t = {}
  for k = 6, 1, -1 do t[k] = n % 256; n = math.floor(n / 256) end
  return string.char(unpack(t))
end
local function live(rec, now)
  local e = u48(rec, 2)
  return e == 0 or e > now
end
local function ids(packed)
  local out = {}
  local i = 1
  while i < #packed do
    local a, b = string.byte(packed, i, i + 1)
    local n = a * 256 + b
    out[#out + 1] = string.sub(packed, i + 2, i + 1 + n)
    i = i + 2 + n
  end
  return out
end
local function entry(id)
  return string.char(math.floor(#id / 256), #id % 256) .. id
end
local function fpAdd(key, fp, id)
  redis.call('HSET', key, fp, (redis.call('HGET', key, fp) or '') .. entry(id))
end
local function oAdd(dir, seq, id)
  local b = math.floor(seq / 128)
  redis.call('ZADD', dir .. ':' .. b, seq, id)
  redis.call('ZADD', dir, b, b)
end
local function oRemove(dir, seq, id)
  local b = math.floor(seq / 128)
  local k = dir .. ':' .. b
  redis.call('ZREM', k, id)
  if redis.call('EXISTS', k) == 0 then redis.call('ZREM', dir, b) end
end
local function dueAdd(dir, seq, ms, id)
  local b = math.floor(seq / 128)
  redis.call('ZADD', dir .. ':' .. b, ms, id)
  redis.call('ZADD', dir, 'LT', ms, b)
end
local function dueFirst(dir, b)
  local first = redis.call('ZRANGE', dir .. ':' .. b, 0, 0, 'WITHSCORES')
  if #first == 0 then redis.call('ZREM', dir, b) else redis.call('ZADD', dir, first[2], b) end
end
local function dueRemove(dir, seq, id)
  local b = math.floor(seq / 128)
  if redis.call('ZREM', dir .. ':' .. b, id) == 1 then dueFirst(dir, b) end
end
local function fpRemove(key, fp, id)
  local packed = redis.call('HGET', key, fp)
  if not packed then return end
  local keep = {}
  for _, x in ipairs(ids(packed)) do if x ~= id then keep[#keep + 1] = entry(x) end end
  if #keep == 0 then redis.call('HDEL', key, fp) else redis.call('HSET', key, fp, table.concat(keep)) end
end`;

/**
 * KEYS: the records hash, seq, the fingerprint hash, the cvc due zset, the containers set, then
 * every other key written (declared for a Cluster). ARGV[1] now (ms), ARGV[2..3] the first and last
 * order bucket declared (the sequence numbers this batch gets must fall in them, else {'retry'},
 * nothing written); then per record: id, record,
 * fingerprint field ('' none), dedupe ('1'), type+container+fingerprint bytes (record.ts dedupeKey), its container's bucket zset, the container,
 * the cvc's purge time ('' none), n, n index zsets. Plans first, writing nothing: a deduplicating
 * record takes the oldest live token of its tenant, type, container and fingerprint, or an earlier
 * record of the batch; any other record whose id exists fails the batch ({'dup', id}). Answers
 * {'ok', per record: id and record of the token it matched, or '' and '' when written}.
 */
export const INSERT = `${LIB}
local now = tonumber(ARGV[1])
local batch = {}
local i = 4
while i <= #ARGV do
  local b = {id = ARGV[i], rec = ARGV[i + 1], fp = ARGV[i + 2], dedupe = ARGV[i + 3] == '1', tc = ARGV[i + 4],
    ck = ARGV[i + 5], container = ARGV[i + 6], cvc = ARGV[i + 7], ix = {}}
  local n = tonumber(ARGV[i + 8])
  for j = 1, n do b.ix[j] = ARGV[i + 8 + j] end
  i = i + 9 + n
  batch[#batch + 1] = b
end
local function liveMatch(b)
  local packed = redis.call('HGET', KEYS[3], b.fp)
  if not packed then return nil end
  local best, bestSeq = nil, nil
  for _, id in ipairs(ids(packed)) do
    local rec = redis.call('HGET', KEYS[1], id)
    if rec and string.sub(rec, 24, 23 + #b.tc) == b.tc and live(rec, now) then
      local s = u48(rec, 14)
      if not bestSeq or s < bestSeq then best, bestSeq = {id, rec}, s end
    end
  end
  return best
end
local seen, byDd, plan = {}, {}, {}
for k, b in ipairs(batch) do
  local hit = nil
  local dd = b.fp .. '\\0' .. b.tc
  -- A stored token is older than any of the batch: it wins over an earlier record of the batch.
  -- b.tc holds the whole fingerprint; the field b.fp only its prefix.
  if b.dedupe and b.fp ~= '' then hit = liveMatch(b) or byDd[dd] end
  if hit then
    plan[k] = hit
  else
    if seen[b.id] or redis.call('HEXISTS', KEYS[1], b.id) == 1 then return {'dup', b.id} end
    seen[b.id] = true
    plan[k] = false
    if b.fp ~= '' and not byDd[dd] then byDd[dd] = {b.id, b.rec} end
  end
end
local writes = 0
for k = 1, #batch do if not plan[k] then writes = writes + 1 end end
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if writes > 0 and (math.floor((cur + 1) / 128) < tonumber(ARGV[2]) or math.floor((cur + writes) / 128) > tonumber(ARGV[3])) then
  return {'retry'}
end
local out = {'ok'}
for k, b in ipairs(batch) do
  if plan[k] then
    out[#out + 1] = plan[k][1]
    out[#out + 1] = plan[k][2]
  else
    local seq = redis.call('INCR', KEYS[2])
    redis.call('HSET', KEYS[1], b.id, string.sub(b.rec, 1, 13) .. w48(seq) .. string.sub(b.rec, 20))
    oAdd(b.ck, seq, b.id)
    for _, z in ipairs(b.ix) do redis.call('ZADD', z, seq, b.id) end
    if b.fp ~= '' then fpAdd(KEYS[3], b.fp, b.id) end
    if b.cvc ~= '' then dueAdd(KEYS[4], seq, b.cvc, b.id) end
    redis.call('SADD', KEYS[5], b.container)
    out[#out + 1] = ''
    out[#out + 1] = ''
  end
end
return out`;

/**
 * KEYS: records hash, fingerprint hash, cvc due zset, containers set, then the zsets. ARGV: now,
 * id, the record as read (compare-and-set: -1 when it changed since), the new record, the old and
 * new fingerprint ('' none), the container, the cvc's purge time ('' none), n, the old zsets, m,
 * the new zsets, the old and the new container's bucket directory. 0 when the token does not exist or expired. The sequence number stays.
 */
export const UPDATE = `${LIB}
local now = tonumber(ARGV[1])
local id = ARGV[2]
local cur = redis.call('HGET', KEYS[1], id)
if not cur or not live(cur, now) then return 0 end
if cur ~= ARGV[3] then return -1 end
local n = tonumber(ARGV[9])
for j = 1, n do redis.call('ZREM', ARGV[9 + j], id) end
local seq = u48(cur, 14)
local m = tonumber(ARGV[10 + n])
for j = 1, m do redis.call('ZADD', ARGV[10 + n + j], seq, id) end
oRemove(ARGV[11 + n + m], seq, id)
oAdd(ARGV[12 + n + m], seq, id)
redis.call('HSET', KEYS[1], id, string.sub(ARGV[4], 1, 13) .. string.sub(cur, 14, 19) .. string.sub(ARGV[4], 20))
if ARGV[5] ~= ARGV[6] then
  if ARGV[5] ~= '' then fpRemove(KEYS[2], ARGV[5], id) end
  if ARGV[6] ~= '' then fpAdd(KEYS[2], ARGV[6], id) end
end
dueRemove(KEYS[3], seq, id)
if ARGV[8] ~= '' then dueAdd(KEYS[3], seq, ARGV[8], id) end
redis.call('SADD', KEYS[4], ARGV[7])
return 1`;

/**
 * KEYS: records hash, fingerprint hash, cvc due zset, then the zsets. ARGV: now, id, the record as
 * read (-1 when it changed since), its fingerprint ('' none), its container's bucket directory,
 * n, its zsets. 0: no such token; 2:
 * it had expired (deleted all the same); 1: deleted.
 */
export const DELETE = `${LIB}
local now = tonumber(ARGV[1])
local id = ARGV[2]
local cur = redis.call('HGET', KEYS[1], id)
if not cur then return 0 end
if cur ~= ARGV[3] then return -1 end
for j = 1, tonumber(ARGV[6]) do redis.call('ZREM', ARGV[6 + j], id) end
oRemove(ARGV[5], u48(cur, 14), id)
if ARGV[4] ~= '' then fpRemove(KEYS[2], ARGV[4], id) end
redis.call('HDEL', KEYS[1], id)
dueRemove(KEYS[3], u48(cur, 14), id)
if not live(cur, now) then return 2 end
return 1`;

/**
 * KEYS: the cvc due directory, the records hash, then the due buckets named in ARGV. ARGV: now,
 * bucket numbers (read from the directory: their earliest is due). Cuts the cvc off every record
 * due in them (the record keeps cvc_expires_at); answers how many were due.
 */
export const PURGE_CVC = `${LIB}
local n = 0
for j = 2, #ARGV do
  local b = ARGV[j]
  local k = KEYS[1] .. ':' .. b
  local due = redis.call('ZRANGEBYSCORE', k, '-inf', ARGV[1])
  for _, id in ipairs(due) do
    local rec = redis.call('HGET', KEYS[2], id)
    if rec then
      local a1, a2, a3, a4 = string.byte(rec, 20, 23)
      local at = ((a1 * 256 + a2) * 256 + a3) * 256 + a4
      if at < #rec then redis.call('HSET', KEYS[2], id, string.sub(rec, 1, at)) end
    end
  end
  if #due > 0 then redis.call('ZREM', k, unpack(due)) end
  dueFirst(KEYS[1], b)
  n = n + #due
end
return n`;

export { LIB as SCRIPT_LIB };
