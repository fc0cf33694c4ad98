-- ack.lua : settle finished jobs (success): forget them.
--
-- KEYS[1]..[12]  the queue's keys, in their one order (keys.QueueKeys.script_keys); used:
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[3]  jobs      HASH  id -> envelope
-- KEYS[4]  attempts  HASH  id -> lease token
-- KEYS[5]  cancel    SET   ids whose cancel was asked while they ran
-- KEYS[9]  prio      HASH  id -> priority
-- ARGV     pairs: id, token
--
-- An ack whose token is stale (the lease expired and the job was recovered or
-- claimed again) is refused and changes nothing. Tokens and leases are read for the
-- whole call (HMGET, ZMSCORE) before the first write.
-- Returns: one integer per pair: 1 acked, 0 refused (lease lost)
-- Cost: at most 250 pairs per call (scripts.MAX_ACK; callers split bigger batches):
--       O(n log N).
--@include wrong_type
--@include forget
local inflight, jobs, attempts, cancel, prio = KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[9]
local err = wrong_type({'', 'zset', 'hash', 'hash', 'set', '', '', '', 'hash'})
if err then return err end
local ids = {}
for i = 1, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return {} end
local tokens = redis.call('HMGET', attempts, unpack(ids))
local leased = redis.call('ZMSCORE', inflight, unpack(ids))
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
  redis.call('ZREM', inflight, unpack(done))
  forget(jobs, attempts, cancel, prio, done)
end
return out
