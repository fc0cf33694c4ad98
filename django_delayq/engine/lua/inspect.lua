-- inspect.lua : where one job is, read atomically (admin, tests, reconciler).
--
-- KEYS[1]..[7]  the queue's keys, in their one order (keys.QueueKeys.script_keys); used:
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[3]  jobs      HASH  id -> envelope
-- KEYS[4]  attempts  HASH  id -> lease token
-- KEYS[5]  cancel    SET   ids whose cancel was asked while they ran
-- KEYS[6]  dead      ZSET  died_ms -> id
-- ARGV[1]  id
--
-- Returns: {place, score, attempts, envelope or false, cancel_requested}
--          place: "pending" | "inflight" | "dead" | "" (not in Redis)
--          score -1 when it is not a time (+-inf); attempts -1 when not an integer
-- Cost: O(log N), one job per call.
--@include wrong_type
--@include as_ms
--@include bad_count
local pending, inflight, jobs, attempts, cancel, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
                                                        KEYS[5], KEYS[6]
local err = wrong_type({'zset', 'zset', 'hash', 'hash', 'set', 'zset'})
if err then return err end
local id = ARGV[1]
local place, score = '', -1
for _, where in ipairs({{'pending', pending}, {'inflight', inflight}, {'dead', dead}}) do
  local s = redis.call('ZSCORE', where[2], id)
  if s then place, score = where[1], as_ms(s) or -1; break end
end
local count = redis.call('HGET', attempts, id)
local tries = 0
if count then tries = bad_count(count) and -1 or tonumber(count) end
return {place, score, tries, redis.call('HGET', jobs, id),
        redis.call('SISMEMBER', cancel, id)}
