-- release_callable.lua : free the concurrency slots of settled jobs (callable limits).
--
-- KEYS: running:zset
--          grants   ZSET  "<id>:<ms>" -> grant ms (not used here)
--          running  ZSET  id -> slot deadline ms
--          next_free STRING (not used here)
--          (keys.CallableLimitKeys: one hash tag {prefix:limit:<path>})
-- ARGV     job ids
--
-- A grant in the rate window stays counted (the job did start). An id holding no slot
-- (already freed, expired) changes nothing.
-- Returns: how many slots were freed
-- Cost: at most 250 ids per call (scripts.MAX_RELEASE_CALLABLE): O(n log N).
if #ARGV == 0 then return 0 end
return redis.call('ZREM', running, unpack(ARGV))
