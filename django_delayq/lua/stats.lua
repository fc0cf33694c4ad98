-- stats.lua : counts and times of one queue, read atomically.
--
-- KEYS: pending inflight dead ready
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
--
-- Due jobs are those of ready and those of pending due by now (not promoted yet). Times
-- are those of entries scored in years 1..9999: an entry scored -inf or +inf is counted
-- but never reported as a time. The oldest job of ready is the first of one of its
-- priority levels: read level by level (at most 201, one ZRANGEBYSCORE each).
-- Returns: {now_ms, scheduled (due later), ready (due now), inflight, dead,
--           next_due_ms (-1 none), oldest_due_ms of the due jobs (-1 none),
--           expired leases, the id of the oldest due job and of the next one ('' none)}
--          (Engine.oldest_pending reads the last two: the head of the queue's line)
-- Cost: O(log N) per command, a constant number of commands per call (at most 210: TIME,
--       8 reads and up to 201 levels of ready).
--@include now
--@include ms_range
--@include priority
local now = now_ms(ARGV[1])
local due_now = redis.call('ZCOUNT', pending, '-inf', now)
local total = redis.call('ZCARD', pending)
local nxt = redis.call('ZRANGEBYSCORE', pending, '(' .. now, MAX_MS_ARG, 'WITHSCORES',
                      'LIMIT', 0, 1)
local first = redis.call('ZRANGEBYSCORE', pending, MIN_MS_ARG, now, 'WITHSCORES', 'LIMIT', 0, 1)
local oldest, oldest_id = first[2] and as_ms(first[2]) or -1, first[1] or ''
local from = '-inf'
for _ = 1, 201 do
  local top = redis.call('ZRANGEBYSCORE', ready, from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local due = top[2] and ready_due(top[2])
  if not due then break end
  if oldest < 0 or due < oldest then oldest, oldest_id = due, top[1] end
  from = string.format('%.0f', (math.floor(tonumber(top[2]) / LEVEL) + 1) * LEVEL)
end
local next_due = nxt[2] and as_ms(nxt[2]) or -1
return {now, total - due_now, due_now + redis.call('ZCARD', ready), redis.call('ZCARD', inflight),
        redis.call('ZCARD', dead), next_due, oldest, redis.call('ZCOUNT', inflight, '-inf', now),
        oldest_id, nxt[1] or ''}
