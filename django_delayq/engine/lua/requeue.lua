-- requeue.lua : give a dead job a fresh set of attempts.
--
-- KEYS[1]..[7]  the queue's keys, in their one order (keys.QueueKeys.script_keys); used:
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[4]  attempts  HASH  id -> lease token
-- KEYS[6]  dead      ZSET  died_ms -> id
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target when the job becomes the earliest pending job
-- ARGV[3]  id
-- ARGV[4]  delay_ms
--
-- The attempt counter restarts at 0, so the job gets its max_attempts again.
-- Returns: {outcome, due_ms}  outcome 1 requeued, 0 not in dead
-- Cost: O(log N), one job per call.
--@include now
--@include wrong_type
--@include clamp_ms
--@include wake
local pending, attempts, dead = KEYS[1], KEYS[4], KEYS[6]
local err = wrong_type({'zset', '', '', 'hash', '', 'zset'})
if err then return err end
local now = now_ms(ARGV[1])
local id = ARGV[3]
if not redis.call('ZSCORE', dead, id) then return {0, -1} end
local due = clamp_ms(now + tonumber(ARGV[4]))
local head = pending_head(pending)
redis.call('ZREM', dead, id)
redis.call('HDEL', attempts, id)
redis.call('ZADD', pending, due, id)
wake_if_earliest(ARGV[2], due, head)
return {1, due}
