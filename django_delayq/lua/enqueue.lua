-- enqueue.lua : add jobs to a queue; idempotent by job id.
--
-- KEYS[1]  pending   ZSET  due_ms -> id   (future and due jobs)
-- KEYS[2]  jobs      HASH  id -> envelope (JSON), only for jobs that carry one
-- KEYS[3]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[4]  dead      ZSET  died_ms -> id
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target, told the new earliest due_ms when it moves earlier
-- ARGV[3..] groups of 4: id, at_ms (absolute; "-1" = use now_ms + delay_ms), delay_ms,
--           envelope ("" = the payload lives outside Redis, e.g. in the audit row: only
--           the id is stored, ~130 bytes a pending job instead of ~250)
--
-- A job whose id is already known (pending, in flight, dead, or with an envelope) is
-- left alone.
-- Returns: {added, now_ms}
-- Cost: O(n log N) for the n jobs of this call (callers send at most a few thousand);
--       independent of the backlog size.
local now = tonumber(ARGV[1])
if now == 0 then
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local earliest = nil
local added = 0
for i = 3, #ARGV, 4 do
  local id = ARGV[i]
  local env = ARGV[i + 3]
  if not redis.call('ZSCORE', KEYS[1], id) and not redis.call('ZSCORE', KEYS[3], id)
      and not redis.call('ZSCORE', KEYS[4], id)
      and (env == '' and redis.call('HEXISTS', KEYS[2], id) == 0
           or env ~= '' and redis.call('HSETNX', KEYS[2], id, env) == 1) then
    local due = tonumber(ARGV[i + 1])
    if due < 0 then due = now + tonumber(ARGV[i + 2]) end
    redis.call('ZADD', KEYS[1], due, id)
    added = added + 1
    if earliest == nil or due < earliest then earliest = due end
  end
end
if earliest ~= nil and (head[2] == nil or earliest < tonumber(head[2])) then
  redis.call('PUBLISH', ARGV[2], earliest)
end
return {added, now}
