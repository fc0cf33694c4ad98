-- claim.lua : take up to `limit` due jobs and lease them to the caller.
--
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[3]  jobs      HASH  id -> envelope (absent for jobs whose payload is elsewhere)
-- KEYS[4]  attempts  HASH  id -> deliveries so far (the lease token)
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  limit     most jobs to claim (1..1000)
-- ARGV[3]  lease_ms  lease length; the job is redelivered if not settled or extended by then
--
-- Each claimed job gets attempts += 1; that number is its lease token for ack/nack/extend.
-- Returns: {now_ms, next_due_ms (-1 when empty), id_1, due_ms_1, token_1, envelope_1, ...}
--          envelope "" = not in Redis: the caller loads the payload (the audit row)
-- Cost: O(limit * log N); there is no separate "promote" step: due jobs are the
--       score range (-inf, now] of pending, read with LIMIT.
local now = tonumber(ARGV[1])
if now == 0 then
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local deadline = now + tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {now, -1}
if #due > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #due / 2 - 1)
  local ids = {}
  for i = 1, #due, 2 do ids[#ids + 1] = due[i] end
  local envs = redis.call('HMGET', KEYS[3], unpack(ids))
  local leased = {}
  for j = 1, #ids do
    local token = redis.call('HINCRBY', KEYS[4], ids[j], 1)
    leased[#leased + 1] = deadline
    leased[#leased + 1] = ids[j]
    out[#out + 1] = ids[j]
    out[#out + 1] = due[2 * j]
    out[#out + 1] = token
    out[#out + 1] = envs[j] or ''
  end
  redis.call('ZADD', KEYS[2], unpack(leased))
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then out[2] = tonumber(head[2]) end
return out
