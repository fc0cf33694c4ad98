-- reschedule.lua : move a waiting job to a new due time ("run now" is delay 0).
--
-- KEYS: pending:zset inflight:zset ready:zset prio:hash urgent
-- KEYS: group:hash group_ready:zset group_turns:zset
-- used, in that order (the names of keys.QueueKeys):
--          pending   ZSET  due_ms -> id
--          inflight  ZSET  lease_deadline_ms -> id
--          ready     ZSET  ready score -> id
--          prio      HASH  id -> priority
--          group_ready, group_turns (and group)  a grouped queue's index, its rotation
--                    (lib.lua group_index, written by line_write; docs/groups.md)
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target when the job moves the queue's next claim earlier
-- ARGV[3]  id
-- ARGV[4]  at_ms     absolute due time; "-1" = now_ms + delay_ms (clamped to years 1..9999)
-- ARGV[5]  delay_ms
--
-- A job of pending or ready leaves its place and goes back in line at the new due time
-- with its priority (lib.lua line).
-- Returns: {outcome, due_ms}  outcome 1 moved, 2 already running, 0 not found
-- Cost: O(log N), one job per call.
--@include ms_range
--@include line
local now = now_ms(ARGV[1])
local id = ARGV[3]
local due = tonumber(ARGV[4])
if due < 0 then due = now + tonumber(ARGV[5]) end
due = clamp_ms(due)
if redis.call('ZSCORE', pending, id) or redis.call('ZSCORE', ready, id) then
  local priority = priority_of(redis.call('HGET', prio, id))
  redis.call('ZREM', pending, id)
  redis.call('ZREM', ready, id)
  local line = new_line(pending, ready)
  enter(line, id, due, priority, now)
  line_write(line, pending, ready, ARGV[2], id)
  return {1, due}
end
if redis.call('ZSCORE', inflight, id) then return {2, -1} end
return {0, -1}
