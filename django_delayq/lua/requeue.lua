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
-- Cost: O(log N).
local now = tonumber(ARGV[1])
if now == 0 then
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local id = ARGV[3]
if redis.call('ZREM', KEYS[2], id) == 0 then return {0, -1} end
local due = now + tonumber(ARGV[4])
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('HDEL', KEYS[3], id)
redis.call('ZADD', KEYS[1], due, id)
if head[2] == nil or due < tonumber(head[2]) then redis.call('PUBLISH', ARGV[2], due) end
return {1, due}
