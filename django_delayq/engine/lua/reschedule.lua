-- reschedule.lua : move a pending job to a new due time ("run now" is delay 0).
--
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target when the job becomes the earliest pending job
-- ARGV[3]  id
-- ARGV[4]  at_ms     absolute due time; "-1" = now_ms + delay_ms (clamped to years 1..9999)
-- ARGV[5]  delay_ms
--
-- Returns: {outcome, due_ms}  outcome 1 moved, 2 already running, 0 not found
-- Cost: O(log N), one job per call.
local err = wrong_type({'zset', 'zset'})
if err then return err end
local now = now_ms(ARGV[1])
local id = ARGV[3]
local due = tonumber(ARGV[4])
if due < 0 then due = now + tonumber(ARGV[5]) end
due = clamp_ms(due)
if redis.call('ZSCORE', KEYS[1], id) then
  local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  redis.call('ZADD', KEYS[1], 'XX', due, id)
  if due < tonumber(head[2]) or head[1] == id then redis.call('PUBLISH', ARGV[2], due) end
  return {1, due}
end
if redis.call('ZSCORE', KEYS[2], id) then return {2, -1} end
return {0, -1}
