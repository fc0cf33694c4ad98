-- inspect.lua : where one job is, read atomically (admin, tests, reconciler).
--
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[3]  dead      ZSET  died_ms -> id
-- KEYS[4]  jobs      HASH  id -> envelope
-- KEYS[5]  attempts  HASH  id -> lease token
-- KEYS[6]  cancel    SET   ids whose cancel was asked while they ran
-- ARGV[1]  id
--
-- Returns: {place, score, attempts, envelope or false, cancel_requested}
--          place: "pending" | "inflight" | "dead" | "" (not in Redis)
--          score -1 when it is not a time (+-inf); attempts -1 when not an integer
-- Cost: O(log N), one job per call.
local err = wrong_type({'zset', 'zset', 'zset', 'hash', 'hash', 'set'})
if err then return err end
local id = ARGV[1]
local place, score = '', -1
for i, name in ipairs({'pending', 'inflight', 'dead'}) do
  local s = redis.call('ZSCORE', KEYS[i], id)
  if s then place, score = name, as_ms(s) or -1; break end
end
local count = redis.call('HGET', KEYS[5], id)
local attempts = 0
if count then attempts = bad_count(count) and -1 or tonumber(count) end
return {place, score, attempts, redis.call('HGET', KEYS[4], id),
        redis.call('SISMEMBER', KEYS[6], id)}
