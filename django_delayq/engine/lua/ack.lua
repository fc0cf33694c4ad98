-- ack.lua : settle finished jobs (success): forget them.
--
-- KEYS[1]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[2]  jobs      HASH  id -> envelope
-- KEYS[3]  attempts  HASH  id -> lease token
-- KEYS[4]  cancel    SET   ids whose cancel was asked while they ran
-- ARGV     pairs: id, token
--
-- An ack whose token is stale (the lease expired and the job was recovered or
-- claimed again) is refused and changes nothing. Tokens and leases are read for the
-- whole call (HMGET, ZMSCORE) before the first write.
-- Returns: one integer per pair: 1 acked, 0 refused (lease lost)
-- Cost: at most 250 pairs per call (scripts.MAX_ACK; callers split bigger batches):
--       O(n log N).
local err = wrong_type({'zset', 'hash', 'hash', 'set'})
if err then return err end
local ids = {}
for i = 1, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return {} end
local tokens = redis.call('HMGET', KEYS[3], unpack(ids))
local leased = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local out, done, seen = {}, {}, {}
for j = 1, #ids do
  local id = ids[j]
  if leased[j] and tokens[j] == ARGV[2 * j] and not seen[id] then
    seen[id] = true
    done[#done + 1] = id
    out[j] = 1
  else
    out[j] = 0
  end
end
if #done > 0 then
  redis.call('ZREM', KEYS[1], unpack(done))
  redis.call('HDEL', KEYS[2], unpack(done))
  redis.call('HDEL', KEYS[3], unpack(done))
  redis.call('SREM', KEYS[4], unpack(done))
end
return out
