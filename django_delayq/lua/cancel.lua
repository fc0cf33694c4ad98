-- cancel.lua : cancel one job, atomically, and say whether the cancel won the race.
--
-- KEYS: pending inflight jobs attempts cancel dead ready prio urgent runs group hold settled
-- ARGV[1]  id
-- ARGV[2]  hold_ms   "0", or how long a job not found is held back (a cancel whose row
--                    decides: core/workflows.py asks it when the row is unfinished)
--
-- Pending, ready or dead: removed, it will never run (again). In flight: it keeps running,
-- but it is marked so that a failure or a lost lease does not retry it. Not found, with
-- hold_ms: the job's send may be under way (its row committed by another process, the
-- canceller's transaction still open): ``hold`` keeps it, should it arrive
-- (enqueue.lua and reenqueue.lua put it in pending, due when the hold ends), from being
-- claimed before the canceller's commit makes its row final; the cancel sent after that
-- commit (hold_ms "0") removes it and the hold. A rolled-back cancel leaves the hold to
-- end: the job then waits until it does. Found, or with hold_ms "0": no hold is kept.
-- The key expires when its last hold ends; a reschedule moves a held job no earlier than
-- its hold's end (move.lua).
-- Settled (it finished a moment ago, its worker's row not landed yet): 3, no hold (the row
-- must not decide: the worker's row records the run).
-- Returns: 1 cancelled, 2 already running (marked: no retry), 3 settled, its row coming,
--          0 not found (done or unknown)
-- Cost: O(log N), one job per call; a hold written drops at most 100 holds that ended.
--@include forget
--@include now
local id, hold_ms = ARGV[1], tonumber(ARGV[2])
local outcome = 0
if redis.call('ZREM', pending, id) == 1 or redis.call('ZREM', ready, id) == 1
   or redis.call('ZREM', dead, id) == 1 then
  forget({id})
  outcome = 1
elseif redis.call('ZSCORE', inflight, id) then
  redis.call('SADD', cancel, id)
  outcome = 2
elseif redis.call('ZSCORE', settled, id) then
  outcome = 3
end
if outcome == 0 and hold_ms > 0 then
  local now = time_ms(server_time())
  local ended = redis.call('ZRANGEBYSCORE', hold, '-inf', now, 'LIMIT', 0, 100)
  if #ended > 0 then redis.call('ZREM', hold, unpack(ended)) end
  redis.call('ZADD', hold, now + hold_ms, id)
  -- the key goes when its last hold ends (a hold no cancel removed: a rollback, a shard
  -- the cancel after commit did not ask)
  if redis.call('PTTL', hold) < hold_ms then redis.call('PEXPIRE', hold, hold_ms) end
else
  redis.call('ZREM', hold, id)
end
return outcome
