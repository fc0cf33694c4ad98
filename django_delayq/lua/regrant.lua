-- regrant.lua : renew a stale rate grant right before its job starts.
--
-- KEYS: inflight:zset attempts:hash limit:hash starts:zset
-- used, in that order (the names of keys.QueueKeys):
--          inflight  ZSET  lease_deadline_ms -> id
--          attempts  HASH  id -> lease token
--          limit     HASH  rate, per_ms: the queue's rate limit as it is now (claim.lua)
--          starts    ZSET  "<id>:<token>:<ms>" -> grant ms, the rate limit's window log
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  id        the job
-- ARGV[3]  token     its lease token (this delivery)
-- ARGV[4]  grant_ms  the server ms of its claim: its window entry is "<id>:<token>:<grant_ms>"
--
-- A queue's rate counts starts, but claim.lua grants them when it leases (a worker claims
-- ahead of its free threads); a job that waited for a thread past the worker's bound asks
-- again here before it starts (worker/gates.py StartGate). Its own entry leaves the window
-- whatever the answer (a job handed back burns no grant); then the window is trimmed as
-- claim.lua does, and with room under the queue's current rate the job gets an entry at now.
-- Returns: {answer, ms}: answer 1 go (ms = now: its entry is logged at now), 0 wait (ms =
--          when the window next has room: hand the job back due then, its own entry gone),
--          -1 lost (not held under this token: nothing written). A queue without a rate
--          now: 1 (its own entry, if any, removed).
-- Cost: one job per call: a ZSCORE, an HGET, an HMGET, one ZREM, at most 1,000 old window
--       entries dropped (as claim.lua), a ZCOUNT and one ZRANGEBYSCORE LIMIT 1 or one ZADD:
--       O(log N).
--@include now
--@include trim_log
local TRIM = 1000
local now = now_ms(ARGV[1])
local id, token = ARGV[2], ARGV[3]
if not redis.call('ZSCORE', inflight, id) or redis.call('HGET', attempts, id) ~= token then
  return {-1, now}
end
local conf = redis.call('HMGET', limit, 'rate', 'per_ms')
local rate, per_ms = tonumber(conf[1]), tonumber(conf[2])
redis.call('ZREM', starts, id .. ':' .. token .. ':' .. (ARGV[4] or ''))
if not (rate and per_ms and rate >= 1 and per_ms >= 1) then return {1, now} end
rate, per_ms = math.floor(rate), math.floor(per_ms)
local cutoff = now - per_ms
trim_log(starts, cutoff, TRIM)
local floor = '(' .. string.format('%.0f', cutoff)
local in_window = redis.call('ZCOUNT', starts, floor, '+inf')
if in_window < rate then
  local stamp = string.format('%.0f', now)
  redis.call('ZADD', starts, stamp, id .. ':' .. token .. ':' .. stamp)
  return {1, now}
end
-- full: room when the entry that would be the rate-th from the newest leaves the window
local s = redis.call('ZRANGEBYSCORE', starts, floor, '+inf', 'WITHSCORES', 'LIMIT',
                     in_window - rate, 1)
return {0, s[2] and (tonumber(s[2]) + per_ms) or (now + per_ms)}
