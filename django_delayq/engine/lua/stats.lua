-- stats.lua : counts and times of one queue, read atomically.
--
-- KEYS[1]..[7]  the queue's keys, in their one order (keys.QueueKeys.script_keys); used:
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[6]  dead      ZSET  died_ms -> id
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
--
-- Times are those of entries scored in years 1..9999: an entry scored -inf or +inf is
-- counted but never reported as a time.
-- Returns: {now_ms, scheduled (due later), ready (due now), inflight, dead,
--           next_due_ms (-1 none), oldest_due_ms of the ready jobs (-1 none),
--           expired leases}
-- Cost: O(log N), a constant number of commands per call.
--@include now
--@include ms_range
--@include wrong_type
--@include as_ms
local pending, inflight, dead = KEYS[1], KEYS[2], KEYS[6]
local err = wrong_type({'zset', 'zset', '', '', '', 'zset'})
if err then return err end
local now = now_ms(ARGV[1])
local ready = redis.call('ZCOUNT', pending, '-inf', now)
local total = redis.call('ZCARD', pending)
local nxt = redis.call('ZRANGEBYSCORE', pending, '(' .. now, MAX_MS_ARG, 'WITHSCORES',
                      'LIMIT', 0, 1)
local first = redis.call('ZRANGEBYSCORE', pending, MIN_MS_ARG, now, 'WITHSCORES', 'LIMIT', 0, 1)
local oldest = -1
if first[2] then oldest = as_ms(first[2]) or -1 end
local next_due = -1
if nxt[2] then next_due = as_ms(nxt[2]) or -1 end
return {now, total - ready, ready, redis.call('ZCARD', inflight), redis.call('ZCARD', dead),
        next_due, oldest, redis.call('ZCOUNT', inflight, '-inf', now)}
