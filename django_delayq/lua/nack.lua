-- nack.lua : settle failed jobs: back to pending after a delay, or to dead.
--
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[3]  jobs      HASH  id -> envelope
-- KEYS[4]  attempts  HASH  id -> lease token
-- KEYS[5]  cancel    SET   ids whose cancel was asked while they ran
-- KEYS[6]  dead      ZSET  died_ms -> id
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target when a retry becomes the earliest pending job
-- ARGV[3]  dead_max  dead jobs kept; the oldest beyond it are dropped (at most 100 per call)
-- ARGV[4..] triples: id, token, retry_delay_ms ("-1" = no retry: dead)
--
-- A job whose cancel was asked while it ran is not retried: it is forgotten.
-- Returns: one integer per triple: 0 refused (lease lost), 1 retrying, 2 dead, 3 cancelled
-- Cost: O(n log N) for the n triples, plus at most 100 trimmed dead jobs.
local now = tonumber(ARGV[1])
if now == 0 then
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local earliest = nil
local out = {}
for i = 4, #ARGV, 3 do
  local id = ARGV[i]
  local delay = tonumber(ARGV[i + 2])
  if redis.call('HGET', KEYS[4], id) ~= ARGV[i + 1] or redis.call('ZREM', KEYS[2], id) == 0 then
    out[#out + 1] = 0
  elseif redis.call('SREM', KEYS[5], id) == 1 then
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    out[#out + 1] = 3
  elseif delay >= 0 then
    redis.call('ZADD', KEYS[1], now + delay, id)
    if earliest == nil or now + delay < earliest then earliest = now + delay end
    out[#out + 1] = 1
  else
    redis.call('ZADD', KEYS[6], now, id)
    out[#out + 1] = 2
  end
end
if earliest ~= nil and (head[2] == nil or earliest < tonumber(head[2])) then
  redis.call('PUBLISH', ARGV[2], earliest)
end
local excess = redis.call('ZCARD', KEYS[6]) - tonumber(ARGV[3])
if excess > 0 then
  local gone = redis.call('ZPOPMIN', KEYS[6], math.min(excess, 100))
  for j = 1, #gone, 2 do
    redis.call('HDEL', KEYS[3], gone[j])
    redis.call('HDEL', KEYS[4], gone[j])
  end
end
return out
