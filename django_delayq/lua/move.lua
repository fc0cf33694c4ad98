-- move.lua : move one job back in line at a new due time: a waiting job (reschedule; "run
-- now" is delay 0), or a dead one with a fresh set of attempts (requeue).
--
-- KEYS: pending inflight attempts dead ready prio urgent runs group group_ready group_turns hold
-- A requeued job's runs entry becomes "0 <counter> 0" (its next attempt is 1); a waiting
-- job of hold moves no earlier than its hold's end.
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target when the job moves the queue's next claim earlier
-- ARGV[3]  id
-- ARGV[4]  from      "waiting" (pending or ready: reschedule) or "dead" (requeue)
-- ARGV[5]  at_ms     absolute due time; "-1" = now_ms + delay_ms (clamped to years 1..9999)
-- ARGV[6]  delay_ms
--
-- A waiting job leaves its place; a dead one leaves dead with a fresh set of attempts (it
-- gets its max_attempts again) but not its tokens: its counter becomes max(its value,
-- now_ms) — the Redis clock in ms, above any token handed out in an earlier ms
-- (reenqueue.lua says why), also when the counter is gone (a bad value dropped) — and
-- its runs entry's offset that counter, so its next
-- claim's token is one no earlier delivery had (a worker that hung past its lease until
-- the job went dead still holds one) and its attempt number is 1. Either goes back in
-- line at the new due time with its priority (lib.lua line).
-- Returns: {outcome, due_ms}  outcome 1 moved, 2 already running (reschedule), 0 not
--          found (not waiting, or not dead)
-- Cost: O(log N), one job per call.
--@include ms_range
--@include line
local now = now_ms(ARGV[1])
local id = ARGV[3]
local due = tonumber(ARGV[5])
due = clamp_ms(due < 0 and now + tonumber(ARGV[6]) or due)
if ARGV[4] == 'dead' then
  if not redis.call('ZSCORE', dead, id) then return {0, -1} end
  redis.call('ZREM', dead, id)
  -- attempts afresh (offset = counter: the next is 1), tokens never again
  local n = tonumber(redis.call('HGET', attempts, id)) or 0
  if not (n >= 0 and n < 2^53) then n = 0 end  -- not a count (nan, inf): the clock
  local counter = string.format('%.0f', math.max(now, n))
  redis.call('HSET', attempts, id, counter)
  redis.call('HSET', runs, id, '0 ' .. counter .. ' 0')
elseif redis.call('ZSCORE', pending, id) or redis.call('ZSCORE', ready, id) then
  redis.call('ZREM', pending, id)
  redis.call('ZREM', ready, id)
  -- held back by a cancel whose transaction may be open: not before the hold ends
  local held_until = tonumber(redis.call('ZSCORE', hold, id))
  if held_until and held_until > due then due = held_until end
else
  return {redis.call('ZSCORE', inflight, id) and 2 or 0, -1}
end
local line = new_line(pending, ready)
enter(line, id, due, priority_of(redis.call('HGET', prio, id)), now)
line_write(line, pending, ready, ARGV[2], id)
return {1, due}
