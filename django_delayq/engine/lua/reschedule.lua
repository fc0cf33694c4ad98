-- reschedule.lua : move a pending job to a new due time ("run now" is delay 0).
--
-- KEYS[1]..[7]  the queue's keys, in their one order (keys.QueueKeys.script_keys); used:
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
--@include now
--@include wrong_type
--@include clamp_ms
--@include wake
local pending, inflight = KEYS[1], KEYS[2]
local err = wrong_type({'zset', 'zset'})
if err then return err end
local now = now_ms(ARGV[1])
local id = ARGV[3]
local due = tonumber(ARGV[4])
if due < 0 then due = now + tonumber(ARGV[5]) end
due = clamp_ms(due)
if redis.call('ZSCORE', pending, id) then
  local head = pending_head(pending)
  redis.call('ZADD', pending, 'XX', due, id)
  wake_if_earliest(ARGV[2], due, head, id)
  return {1, due}
end
if redis.call('ZSCORE', inflight, id) then return {2, -1} end
return {0, -1}
