-- extend.lua : heartbeat; push the lease deadline of running jobs forward.
--
-- KEYS[1]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[2]  attempts  HASH  id -> lease token
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  lease_ms  new deadline = now_ms + lease_ms
-- ARGV[3..] pairs: id, token
--
-- Returns: one integer per pair: 1 extended, 0 lease lost (expired and recovered,
--          or the token is stale)
-- Cost: O(n log N) for the n pairs of this call.
local now = tonumber(ARGV[1])
if now == 0 then
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local deadline = now + tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[2], id) == ARGV[i + 1] and redis.call('ZSCORE', KEYS[1], id) then
    redis.call('ZADD', KEYS[1], 'XX', deadline, id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
