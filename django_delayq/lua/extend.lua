-- extend.lua : heartbeat; push the lease deadline of running jobs forward.
--
-- KEYS: inflight attempts
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  lease_ms  new deadline = now_ms + lease_ms
-- ARGV[3..] pairs: id, token
--
-- Tokens and leases are read for the whole call before the first write.
-- Returns: one integer per pair: 1 extended, 0 lease lost (expired and recovered,
--          or the token is stale)
-- Cost: at most 250 pairs per call (scripts.MAX_EXTEND; callers split bigger batches):
--       O(n log N).
--@include now
--@include call_many
local now = now_ms(ARGV[1])
local deadline = now + tonumber(ARGV[2])
local ids = {}
for i = 3, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return {} end
local tokens = redis.call('HMGET', attempts, unpack(ids))
local leased = redis.call('ZMSCORE', inflight, unpack(ids))
local out, pushed = {}, {}
for j = 1, #ids do
  if leased[j] and tokens[j] == ARGV[2 * j + 2] then
    pushed[#pushed + 1] = deadline
    pushed[#pushed + 1] = ids[j]
    out[j] = 1
  else
    out[j] = 0
  end
end
if #pushed > 0 then call_many('ZADD', inflight, {'XX'}, pushed) end
return out
