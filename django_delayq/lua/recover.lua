-- recover.lua : take back jobs whose lease expired (their worker died or hung).
--
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[3]  jobs      HASH  id -> envelope
-- KEYS[4]  attempts  HASH  id -> lease token (= deliveries so far)
-- KEYS[5]  cancel    SET   ids whose cancel was asked while they ran
-- KEYS[6]  dead      ZSET  died_ms -> id
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  limit     most expired leases to handle in this call
-- ARGV[3]  default_max_attempts   used when the envelope does not carry its own
-- ARGV[4]  channel   PUBLISH target when a recovered job becomes the earliest pending job
-- ARGV[5]  dead_max  dead jobs kept (trimmed by nack.lua; here only compared)
-- ARGV[6..] pairs: id, max_attempts — for jobs without an envelope in Redis (payload in
--           the audit row), as the caller read them; default_max_attempts otherwise
--
-- The lost delivery counts as an attempt: a job with attempts left is due again at
-- now_ms; one without goes to dead; one whose cancel was asked is forgotten.
-- Returns: triples id, outcome, attempts  (outcome 1 retrying, 2 dead, 3 cancelled)
-- Cost: O(limit * log N); never scans the backlog.
local now = tonumber(ARGV[1])
if now == 0 then
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local given = {}
for i = 6, #ARGV, 2 do given[ARGV[i]] = tonumber(ARGV[i + 1]) end
local out = {}
local requeued = false
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[2], id)
  local env = redis.call('HGET', KEYS[3], id)
  local n = tonumber(redis.call('HGET', KEYS[4], id) or '0')
  local outcome
  if redis.call('SREM', KEYS[5], id) == 1 then
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    outcome = 3
  else
    local max = given[id] or tonumber(ARGV[3])
    if env then
      local ok, decoded = pcall(cjson.decode, env)
      if ok and type(decoded) == 'table' and tonumber(decoded[4]) then max = tonumber(decoded[4]) end
    end
    if n >= max then
      redis.call('ZADD', KEYS[6], now, id)
      outcome = 2
    else
      redis.call('ZADD', KEYS[1], now, id)
      requeued = true
      outcome = 1
    end
  end
  out[#out + 1] = id
  out[#out + 1] = outcome
  out[#out + 1] = n
end
if requeued then redis.call('PUBLISH', ARGV[4], now) end
return out
