-- cancel.lua : cancel one job, atomically, and say whether the cancel won the race.
--
-- KEYS[1]..[16]  the queue's keys, in their one order (keys.QueueKeys.script_keys); used:
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[3]  jobs      HASH  id -> envelope
-- KEYS[4]  attempts  HASH  id -> lease token
-- KEYS[5]  cancel    SET   ids whose cancel was asked while they ran
-- KEYS[6]  dead      ZSET  died_ms -> id
-- KEYS[8]  ready     ZSET  ready score -> id
-- KEYS[9]  prio      HASH  id -> priority
-- KEYS[16] runs      HASH  id -> "<token> <offset> <streak>" (start marks): forgotten with the job
-- ARGV[1]  id
--
-- Pending, ready or dead: removed, it will never run (again). In flight: it keeps running,
-- but it is marked so that a failure or a lost lease does not retry it.
-- Returns: 1 cancelled, 2 already running (marked: no retry), 0 not found (done or unknown)
-- Cost: O(log N), one job per call.
--@include wrong_type
--@include forget
local pending, inflight, jobs, attempts, cancel, dead, ready, prio = KEYS[1], KEYS[2], KEYS[3],
                                                                    KEYS[4], KEYS[5], KEYS[6],
                                                                    KEYS[8], KEYS[9]
local err = wrong_type({'zset', 'zset', 'hash', 'hash', 'set', 'zset', '', 'zset', 'hash',
                        '', '', '', '', '', '', 'hash'})
if err then return err end
local id = ARGV[1]
if redis.call('ZREM', pending, id) == 1 or redis.call('ZREM', ready, id) == 1
   or redis.call('ZREM', dead, id) == 1 then
  forget(jobs, attempts, cancel, prio, {id})
  return 1
end
if redis.call('ZSCORE', inflight, id) then
  redis.call('SADD', cancel, id)
  return 2
end
return 0
