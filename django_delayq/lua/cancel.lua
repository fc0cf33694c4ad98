-- cancel.lua : cancel one job, atomically, and say whether the cancel won the race.
--
-- KEYS: pending:zset inflight:zset jobs:hash attempts:hash cancel:set dead:zset
-- KEYS: ready:zset prio:hash urgent runs:hash group:hash
-- used, in that order (the names of keys.QueueKeys):
--          pending   ZSET  due_ms -> id
--          inflight  ZSET  lease_deadline_ms -> id
--          jobs      HASH  id -> envelope
--          attempts  HASH  id -> lease token
--          cancel    SET   ids whose cancel was asked while they ran
--          dead      ZSET  died_ms -> id
--          ready     ZSET  ready score -> id
--          prio      HASH  id -> priority
--          runs      HASH  id -> "<token> <offset> <streak>" (start marks): forgotten with the job
-- ARGV[1]  id
--
-- Pending, ready or dead: removed, it will never run (again). In flight: it keeps running,
-- but it is marked so that a failure or a lost lease does not retry it.
-- Returns: 1 cancelled, 2 already running (marked: no retry), 0 not found (done or unknown)
-- Cost: O(log N), one job per call.
--@include forget
local id = ARGV[1]
if redis.call('ZREM', pending, id) == 1 or redis.call('ZREM', ready, id) == 1
   or redis.call('ZREM', dead, id) == 1 then
  forget({id})
  return 1
end
if redis.call('ZSCORE', inflight, id) then
  redis.call('SADD', cancel, id)
  return 2
end
return 0
