-- forget_settled.lua : drop the settled records of jobs whose audit rows have landed,
-- and records older than the keep time (a worker gone before its rows landed, whose
-- rows the reconciler settled long ago).
--
-- KEYS: settled settled_by
-- ARGV[1]  now_ms      integer ms, or "0" to read the server's TIME
-- ARGV[2]  keep_ms     records settled before now - keep_ms are dropped (100 at most)
-- ARGV[3..] ids whose records go
--
-- Returns: {ids forgotten, old records dropped}
-- Cost: at most 250 ids per call (scripts.MAX_FORGET; callers split bigger batches) plus
--       100 old records: O(n log N).
--@include now
local now = now_ms(ARGV[1])
local gone = 0
if #ARGV > 2 then  -- the ids straight from ARGV (at most 250: within unpack's reach)
  gone = redis.call('ZREM', settled, unpack(ARGV, 3))
  redis.call('HDEL', settled_by, unpack(ARGV, 3))
end
local old = redis.call('ZRANGEBYSCORE', settled, '-inf',
                       string.format('%.0f', now - tonumber(ARGV[2])), 'LIMIT', 0, 100)
if #old > 0 then
  redis.call('ZREM', settled, unpack(old))
  redis.call('HDEL', settled_by, unpack(old))
end
return {gone, #old}
