-- release_callable.lua : free the concurrency slots of settled jobs (callable limits).
--
-- KEYS: running
-- ARGV     job ids
--
-- A grant in the rate window stays counted (the job did start). An id holding no slot
-- (already freed, expired) changes nothing.
-- Returns: how many slots were freed
-- Cost: at most 250 ids per call (scripts.MAX_RELEASE_CALLABLE): O(n log N).
if #ARGV == 0 then return 0 end
return redis.call('ZREM', running, unpack(ARGV))
