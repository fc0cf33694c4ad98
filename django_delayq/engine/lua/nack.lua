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
-- A job whose cancel was asked while it ran is not retried: it is forgotten. Tokens,
-- leases and cancel marks are read for the whole call before the first write.
-- Returns: one integer per triple: 0 refused (lease lost), 1 retrying, 2 dead, 3 cancelled
-- Cost: at most 200 triples per call (scripts.MAX_NACK; callers split bigger batches):
--       O(n log N), plus at most 100 trimmed dead jobs.
local err = wrong_type({'zset', 'zset', 'hash', 'hash', 'set', 'zset'})
if err then return err end
local now = now_ms(ARGV[1])
local ids = {}
for i = 4, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
local out = {}
local earliest = nil
if #ids > 0 then
  local tokens = redis.call('HMGET', KEYS[4], unpack(ids))
  local leased = redis.call('ZMSCORE', KEYS[2], unpack(ids))
  local cancelled = redis.call('SMISMEMBER', KEYS[5], unpack(ids))
  local settled, forget, retry, died, seen = {}, {}, {}, {}, {}
  for j = 1, #ids do
    local id = ids[j]
    local i = 3 * j + 1
    if not leased[j] or tokens[j] ~= ARGV[i + 1] or seen[id] then
      out[j] = 0
    else
      seen[id] = true
      settled[#settled + 1] = id
      local delay = tonumber(ARGV[i + 2])
      if cancelled[j] == 1 then
        forget[#forget + 1] = id
        out[j] = 3
      elseif delay >= 0 then
        local due = clamp_ms(now + delay)
        retry[#retry + 1] = due
        retry[#retry + 1] = id
        if earliest == nil or due < earliest then earliest = due end
        out[j] = 1
      else
        died[#died + 1] = now
        died[#died + 1] = id
        out[j] = 2
      end
    end
  end
  local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #settled > 0 then redis.call('ZREM', KEYS[2], unpack(settled)) end
  if #forget > 0 then
    redis.call('SREM', KEYS[5], unpack(forget))
    redis.call('HDEL', KEYS[3], unpack(forget))
    redis.call('HDEL', KEYS[4], unpack(forget))
  end
  if #retry > 0 then call_many('ZADD', KEYS[1], {}, retry) end
  if #died > 0 then call_many('ZADD', KEYS[6], {}, died) end
  if earliest ~= nil and (head[2] == nil or earliest < tonumber(head[2])) then
    redis.call('PUBLISH', ARGV[2], earliest)
  end
end
local excess = redis.call('ZCARD', KEYS[6]) - tonumber(ARGV[3])
if excess > 0 then
  local gone = redis.call('ZPOPMIN', KEYS[6], math.min(excess, 100))
  local trimmed = {}
  for j = 1, #gone, 2 do trimmed[#trimmed + 1] = gone[j] end
  redis.call('HDEL', KEYS[3], unpack(trimmed))
  redis.call('HDEL', KEYS[4], unpack(trimmed))
end
return out
