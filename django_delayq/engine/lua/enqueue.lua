-- enqueue.lua : add jobs to a queue; idempotent by job id.
--
-- KEYS[1]..[7]  the queue's keys, in their one order (keys.QueueKeys.script_keys); used:
-- KEYS[1]  pending   ZSET  due_ms -> id   (future and due jobs)
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[3]  jobs      HASH  id -> envelope (JSON), only for jobs that carry one
-- KEYS[6]  dead      ZSET  died_ms -> id
-- KEYS[7]  epoch     STRING the queue's epoch (core/reconcile.py): set, if absent, to
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
--@include now
--@include wrong_type
--@include clamp_ms
--@include call_many
--@include wake
local pending, inflight, jobs, dead, epoch = KEYS[1], KEYS[2], KEYS[3], KEYS[6], KEYS[7]
local err = wrong_type({'zset', 'zset', 'hash', '', '', 'zset'})
if err then return err end
local now = now_ms(ARGV[1])
local ids = {}
for i = 3, #ARGV, 4 do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return {0, now} end
local head = pending_head(pending)
local in_pending = redis.call('ZMSCORE', pending, unpack(ids))
local in_flight = redis.call('ZMSCORE', inflight, unpack(ids))
local in_dead = redis.call('ZMSCORE', dead, unpack(ids))
local has_env = {}
if redis.call('EXISTS', jobs) == 1 then has_env = redis.call('HMGET', jobs, unpack(ids)) end
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
if #scored > 0 then call_many('ZADD', pending, {}, scored) end
if #envs > 0 then call_many('HSET', jobs, {}, envs) end
wake_if_earliest(ARGV[2], earliest, head)
if redis.call('EXISTS', epoch) == 0 then
  local t = server_time()
  redis.call('SET', epoch, string.format('%.0f', time_ms(t)) .. ':' .. t[2] .. ':e', 'NX')
end
return {#scored / 2, now}
