-- enqueue.lua : add jobs to a queue; idempotent by job id.
--
-- KEYS[1]  pending   ZSET  due_ms -> id   (future and due jobs)
-- KEYS[2]  jobs      HASH  id -> envelope (JSON), only for jobs that carry one
-- KEYS[3]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[4]  dead      ZSET  died_ms -> id
-- KEYS[5]  epoch     STRING (optional) the queue's epoch (reconcile.py): set, if absent, to
--                    "<ms>:<us>:e" whenever jobs are given: whoever first writes a queue's
--                    data creates it, so "no epoch" means "nothing written since empty"
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target, told the new earliest due_ms when it moves earlier
-- ARGV[3..] groups of 4: id, at_ms (absolute; "-1" = use now_ms + delay_ms), delay_ms,
--           envelope ("" = the payload lives outside Redis, e.g. in the audit row: only
--           the id is stored, ~130 bytes a pending job instead of ~250)
--
-- A job whose id is already known (pending, in flight, dead, or with an envelope), or
-- repeated within the call, is left alone. Due times are clamped to years 1..9999.
-- Everything is read (ZMSCORE, HMGET) before the first write.
-- Returns: {added, now_ms}
-- Cost: at most 200 jobs per call (scripts.MAX_ENQUEUE; callers split bigger batches):
--       O(n log N), independent of the backlog size.
local err = wrong_type({'zset', 'hash', 'zset', 'zset'})
if err then return err end
local now = now_ms(ARGV[1])
local ids = {}
for i = 3, #ARGV, 4 do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return {0, now} end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local in_pending = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local in_flight = redis.call('ZMSCORE', KEYS[3], unpack(ids))
local in_dead = redis.call('ZMSCORE', KEYS[4], unpack(ids))
local has_env = {}
if redis.call('EXISTS', KEYS[2]) == 1 then has_env = redis.call('HMGET', KEYS[2], unpack(ids)) end
local seen = {}
local scored, envs = {}, {}
local earliest = nil
for j = 1, #ids do
  local id = ids[j]
  if not (in_pending[j] or in_flight[j] or in_dead[j] or has_env[j] or seen[id]) then
    seen[id] = true
    local i = 4 * j - 1
    local due = tonumber(ARGV[i + 1])
    if due < 0 then due = now + tonumber(ARGV[i + 2]) end
    due = clamp_ms(due)
    scored[#scored + 1] = due
    scored[#scored + 1] = id
    if ARGV[i + 3] ~= '' then envs[#envs + 1] = id; envs[#envs + 1] = ARGV[i + 3] end
    if earliest == nil or due < earliest then earliest = due end
  end
end
if #scored > 0 then call_many('ZADD', KEYS[1], {}, scored) end
if #envs > 0 then call_many('HSET', KEYS[2], {}, envs) end
if earliest ~= nil and (head[2] == nil or earliest < tonumber(head[2])) then
  redis.call('PUBLISH', ARGV[2], earliest)
end
if KEYS[5] and redis.call('EXISTS', KEYS[5]) == 0 then
  local t = redis.call('TIME')
  redis.call('SET', KEYS[5], t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
             .. ':' .. t[2] .. ':e', 'NX')
end
return {#scored / 2, now}
