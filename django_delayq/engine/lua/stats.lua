-- stats.lua : counts and times of one queue, read atomically.
--
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[3]  dead      ZSET  died_ms -> id
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
--
-- Times are those of entries scored in years 1..9999: an entry scored -inf or +inf is
-- counted but never reported as a time.
-- Returns: {now_ms, scheduled (due later), ready (due now), inflight, dead,
--           next_due_ms (-1 none), oldest_due_ms of the ready jobs (-1 none),
--           expired leases}
-- Cost: O(log N), a constant number of commands per call.
local err = wrong_type({'zset', 'zset', 'zset'})
if err then return err end
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ready = redis.call('ZCOUNT', KEYS[1], '-inf', now)
local total = redis.call('ZCARD', KEYS[1])
local nxt = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, MAX_MS_ARG, 'WITHSCORES',
                      'LIMIT', 0, 1)
local first = redis.call('ZRANGEBYSCORE', KEYS[1], MIN_MS_ARG, now, 'WITHSCORES', 'LIMIT', 0, 1)
local oldest = -1
if first[2] then oldest = as_ms(first[2]) or -1 end
local next_due = -1
if nxt[2] then next_due = as_ms(nxt[2]) or -1 end
return {now, total - ready, ready, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
        next_due, oldest, redis.call('ZCOUNT', KEYS[2], '-inf', now)}
