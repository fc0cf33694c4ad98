-- purge.lua : remove up to `limit` waiting jobs (ready first, then pending), never one
-- in flight; the operator's purge of a queue, called until it returns nothing.
--
-- KEYS[1]..[16]  the queue's keys, in their one order (keys.QueueKeys.script_keys); used:
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[3]  jobs      HASH  id -> envelope
-- KEYS[4]  attempts  HASH  id -> lease token
-- KEYS[5]  cancel    SET   ids whose cancel was asked while they ran
-- KEYS[8]  ready     ZSET  ready score -> id
-- KEYS[9]  prio      HASH  id -> priority
-- KEYS[16] runs      HASH  id -> "<token> <offset> <streak>" (start marks): forgotten with the job
-- ARGV[1]  limit     most jobs to remove (1..200; more is capped)
--
-- The removed jobs are forgotten (envelope, attempts count, cancel mark, priority).
-- Returns: the removed ids (as stored)
-- Cost: at most 200 jobs per call (scripts.MAX_PURGE): O(limit log N).
--@include wrong_type
--@include forget
local pending, jobs, attempts, cancel, ready, prio = KEYS[1], KEYS[3], KEYS[4], KEYS[5],
                                                     KEYS[8], KEYS[9]
local err = wrong_type({'zset', '', 'hash', 'hash', 'set', '', '', 'zset', 'hash', '', '',
                        '', '', '', '', 'hash'})
if err then return err end
local want = math.max(1, math.min(tonumber(ARGV[1]) or 1, 200))
local ids = redis.call('ZRANGE', ready, 0, want - 1)
local waiting = {}
if #ids < want then waiting = redis.call('ZRANGE', pending, 0, want - #ids - 1) end
if #ids > 0 then redis.call('ZREM', ready, unpack(ids)) end
if #waiting > 0 then
  redis.call('ZREM', pending, unpack(waiting))
  for _, id in ipairs(waiting) do ids[#ids + 1] = id end
end
forget(jobs, attempts, cancel, prio, ids)
return ids
