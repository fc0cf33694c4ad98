-- purge.lua : remove up to `limit` waiting jobs (ready first, then pending), never one
-- in flight; the operator's purge of a queue, called until it returns nothing.
--
-- KEYS: pending jobs attempts cancel ready prio urgent runs group reconciled
-- A removed job is forgotten from reconciled too (a schedule's tick the caller keeps goes
-- back through reenqueue.lua, which would skip an id re-enqueued lately).
-- ARGV[1]  limit     most jobs to remove (1..200; more is capped)
--
-- The removed jobs are forgotten (envelope, attempts count, cancel mark, priority, start
-- marks, group, a recent re-enqueue).
-- Returns: the removed ids (as stored)
-- Cost: at most 200 jobs per call (scripts.MAX_PURGE): O(limit log N).
--@include forget
local want = math.max(1, math.min(tonumber(ARGV[1]) or 1, 200))
local ids = redis.call('ZRANGE', ready, 0, want - 1)
local waiting = {}
if #ids < want then waiting = redis.call('ZRANGE', pending, 0, want - #ids - 1) end
if #ids > 0 then redis.call('ZREM', ready, unpack(ids)) end
if #waiting > 0 then
  redis.call('ZREM', pending, unpack(waiting))
  for _, id in ipairs(waiting) do ids[#ids + 1] = id end
end
forget(ids)
if #ids > 0 then redis.call('ZREM', reconciled, unpack(ids)) end
return ids
