-- release.lua : hand back claimed jobs that never started (graceful shutdown).
--
-- KEYS[1]..[7]  the queue's keys, in their one order (keys.QueueKeys.script_keys); used:
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[4]  attempts  HASH  id -> lease token
-- ARGV[1]  channel   PUBLISH target, told the earliest released due time
-- ARGV[2..] triples: id, token, due_ms (the due time the job had when claimed)
--
-- The claim is undone: the job is pending at its old due time and the attempt it
-- was charged is given back. A stale token changes nothing. Tokens and leases are
-- read for the whole call before the first write.
-- Returns: one integer per triple: 1 released, 0 refused (lease lost)
-- Cost: at most 200 triples per call (scripts.MAX_RELEASE; callers split bigger
--       batches): O(n log N).
--@include wrong_type
--@include clamp_ms
--@include call_many
local pending, inflight, attempts = KEYS[1], KEYS[2], KEYS[4]
local err = wrong_type({'zset', 'zset', '', 'hash'})
if err then return err end
local ids = {}
for i = 2, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return {} end
local tokens = redis.call('HMGET', attempts, unpack(ids))
local leased = redis.call('ZMSCORE', inflight, unpack(ids))
local out, back, scored, counts, fresh, seen = {}, {}, {}, {}, {}, {}
local earliest = nil
for j = 1, #ids do
  local id = ids[j]
  local i = 3 * j - 1
  if leased[j] and tokens[j] == ARGV[i + 1] and not seen[id] then
    seen[id] = true
    back[#back + 1] = id
    local left = tonumber(tokens[j]) - 1
    if left > 0 then counts[#counts + 1] = id; counts[#counts + 1] = left
    else fresh[#fresh + 1] = id end
    local due = clamp_ms(tonumber(ARGV[i + 2]))
    scored[#scored + 1] = due
    scored[#scored + 1] = id
    if earliest == nil or due < earliest then earliest = due end
    out[j] = 1
  else
    out[j] = 0
  end
end
if #back > 0 then
  redis.call('ZREM', inflight, unpack(back))
  if #counts > 0 then call_many('HSET', attempts, {}, counts) end
  if #fresh > 0 then redis.call('HDEL', attempts, unpack(fresh)) end
  call_many('ZADD', pending, {}, scored)
  redis.call('PUBLISH', ARGV[1], earliest)
end
return out
