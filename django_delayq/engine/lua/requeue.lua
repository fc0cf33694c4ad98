-- requeue.lua : give a dead job a fresh set of attempts.
--
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  dead      ZSET  died_ms -> id
-- KEYS[3]  attempts  HASH  id -> lease token
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target when the job becomes the earliest pending job
-- ARGV[3]  id
-- ARGV[4]  delay_ms
--
-- The attempt counter restarts at 0, so the job gets its max_attempts again.
-- Returns: {outcome, due_ms}  outcome 1 requeued, 0 not in dead
-- Cost: O(log N), one job per call.
local err = wrong_type({'zset', 'zset', 'hash'})
if err then return err end
local now = now_ms(ARGV[1])
local id = ARGV[3]
if not redis.call('ZSCORE', KEYS[2], id) then return {0, -1} end
local due = clamp_ms(now + tonumber(ARGV[4]))
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('ZADD', KEYS[1], due, id)
if head[2] == nil or due < tonumber(head[2]) then redis.call('PUBLISH', ARGV[2], due) end
return {1, due}
