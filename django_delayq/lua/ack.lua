-- ack.lua : settle finished jobs (success): forget them.
--
-- KEYS[1]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[2]  jobs      HASH  id -> envelope
-- KEYS[3]  attempts  HASH  id -> lease token
-- KEYS[4]  cancel    SET   ids whose cancel was asked while they ran
-- ARGV     pairs: id, token
--
-- An ack whose token is stale (the lease expired and the job was recovered or
-- claimed again) is refused and changes nothing.
-- Returns: one integer per pair: 1 acked, 0 refused (lease lost)
-- Cost: O(n log N) for the n pairs of this call.
local out = {}
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[3], id) == ARGV[i + 1] and redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('SREM', KEYS[4], id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
