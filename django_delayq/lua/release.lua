-- release.lua : hand back claimed jobs that never started (graceful shutdown).
--
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[3]  attempts  HASH  id -> lease token
-- ARGV[1]  channel   PUBLISH target, told the earliest released due time
-- ARGV[2..] triples: id, token, due_ms (the due time the job had when claimed)
--
-- The claim is undone: the job is pending at its old due time and the attempt it
-- was charged is given back. A stale token changes nothing.
-- Returns: one integer per triple: 1 released, 0 refused (lease lost)
-- Cost: O(n log N) for the n triples.
local out = {}
local earliest = nil
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[3], id) == ARGV[i + 1] and redis.call('ZREM', KEYS[2], id) == 1 then
    if redis.call('HINCRBY', KEYS[3], id, -1) <= 0 then redis.call('HDEL', KEYS[3], id) end
    local due = tonumber(ARGV[i + 2])
    redis.call('ZADD', KEYS[1], due, id)
    if earliest == nil or due < earliest then earliest = due end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if earliest ~= nil then redis.call('PUBLISH', ARGV[1], earliest) end
return out
