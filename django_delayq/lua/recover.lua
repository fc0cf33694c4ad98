-- recover.lua : take back jobs whose lease expired (their worker died or hung).
--
-- KEYS: pending inflight jobs attempts cancel dead ready prio urgent runs group group_ready group_turns group_running group_held
-- The jobs' group slots are freed (a dead worker's included) and their held groups put
-- back (lib.lua group_slots).
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  limit     most expired leases to handle in this call (1..100; more is capped)
-- ARGV[3]  default_max_attempts   used when the envelope does not carry its own
-- ARGV[4]  channel   PUBLISH target (told now_ms) when jobs are back in line
-- ARGV[5]  dead_max  dead jobs kept (trimmed by nack.lua; here only compared)
-- ARGV[6]  contact   "" (no condition), or "<since_ms>,<last_ms>,<need_ms>,<gap_ms>": the
--           caller's unbroken run of recover calls on this queue (server ms of its first
--           and its last reply); nothing is taken back unless the last is at most gap_ms
--           old and the run at least need_ms long (after a Redis stall every live worker
--           gets that long to extend its leases before any is taken for dead)
-- ARGV[7..] pairs: id, max_attempts — for jobs without an envelope in Redis (payload in
--           the audit row), as the caller read them; default_max_attempts otherwise
--
-- A lost delivery whose run started (its worker marked it in runs before calling the
-- function) counts as an attempt: a job with attempts left is due again at now_ms with
-- its priority (to ready unless pending holds a job due before: lib.lua line); one
-- without goes to dead; one whose cancel was asked is forgotten. A lost delivery that
-- never started (claimed, its worker killed before a thread took it) costs no attempt:
-- its runs entry's offset and streak grow by one and the job is due again at now_ms
-- (after UNSTARTED_MAX such deliveries in a row it counts as an attempt after all: a job
-- whose start mark never reaches Redis cannot come back for ever).
-- Leases whose deadline is not a time (past year 9999, +inf) never expire: up to 10
-- of them are taken back per call too. The batch is read and checked before the first
-- write; a poison entry is set aside alone: an id that cannot be a job id is removed,
-- a job whose attempts value is not an integer goes to dead (the value dropped).
-- Returns: {now_ms, n_aside, n_aside triples: id, reason, removed (1 removed, 0 moved to
--           dead), then triples: id, outcome, attempts  (outcome 1 retrying, 2 dead,
--           3 cancelled, 4 not started: due again, not charged; attempts: the runs
--           started so far)}; {now_ms, 0} when the contact condition refused the call
--          a removed id is shown ASCII-escaped and cut to 64 bytes (it is for the log)
-- Cost: at most 100 leases (scripts.MAX_RECOVER) and 100 max_attempts pairs per call,
--       plus 10 absurd leases: O(limit * log N); never scans the backlog. Group slots:
--       one HMGET and one ZREM, one index read per held group (at most limit).
--@include ms_range
--@include poison
--@include forget
--@include line
--@include offset
--@include group_slots
local now = now_ms(ARGV[1])
if ARGV[6] ~= '' then
  local since, last, need, gap = string.match(ARGV[6], '^(%d+),(%d+),(%d+),(%d+)$')
  since, last, need, gap = tonumber(since), tonumber(last), tonumber(need), tonumber(gap)
  if not gap or now - last > gap or now - since < need then return {now, 0} end
end
local limit = math.max(1, math.min(tonumber(ARGV[2]) or 1, 100))
local ids = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, limit)
if now <= MAX_MS then
  local stuck = redis.call('ZRANGEBYSCORE', inflight, '(' .. MAX_MS_ARG, '+inf', 'LIMIT', 0, 10)
  for _, id in ipairs(stuck) do ids[#ids + 1] = id end
end
local out = {now, 0}
if #ids == 0 then return out end
local given = {}
for i = 7, #ARGV, 2 do given[ARGV[i]] = tonumber(ARGV[i + 1]) end
local envs = {}
if redis.call('EXISTS', jobs) == 1 then envs = redis.call('HMGET', jobs, unpack(ids)) end
local counts = redis.call('HMGET', attempts, unpack(ids))
local marked = redis.call('HMGET', runs, unpack(ids))
local UNSTARTED_MAX = 20
local marks = {}  -- runs entries rewritten: id, "<token> <offset> <streak>"
local cancelled = redis.call('SMISMEMBER', cancel, unpack(ids))
local prios = redis.call('HMGET', prio, unpack(ids))
local line = new_line(pending, ready)
local gone, died, reset, results = {}, {}, {}, {}  -- gone: forgotten (poison, cancelled)
for j, id in ipairs(ids) do
  local why = bad_id(id)
  if why then
    gone[#gone + 1] = id
    out[#out + 1] = shown(id); out[#out + 1] = why; out[#out + 1] = 1
  elseif bad_count(counts[j]) then
    died[#died + 1] = now; died[#died + 1] = id
    reset[#reset + 1] = id
    out[#out + 1] = id; out[#out + 1] = bad_count(counts[j]); out[#out + 1] = 0
  else
    local n = tonumber(counts[j]) or 0
    local k, streak = offset_of(marked[j], n)
    local started = marked[j] and string.match(marked[j], '^(%d+) ') == string.format('%.0f', n)
    local outcome
    if cancelled[j] == 1 then
      gone[#gone + 1] = id
      outcome = 3
    elseif not started and streak < UNSTARTED_MAX then
      k = math.min(k + 1, n)  -- this delivery's token is not an attempt (none: no token)
      marks[#marks + 1] = id
      marks[#marks + 1] = (marked[j] and string.match(marked[j], '^(%d+) ') or '0') .. ' '
                          .. string.format('%.0f', k) .. ' ' .. (streak + 1)
      enter(line, id, now, priority_of(prios[j]), now)
      outcome = 4
      n = n - k
    else
      n = n - k
      local max = given[id] or tonumber(ARGV[3])
      if envs[j] then
        local ok, decoded = pcall(cjson.decode, envs[j])
        local m = ok and type(decoded) == 'table' and tonumber(decoded[4])
        if m and m >= 1 and m <= 1000000000 then max = m end  -- not nan, not absurd
      end
      if n >= max then
        died[#died + 1] = now; died[#died + 1] = id
        outcome = 2
      else
        enter(line, id, now, priority_of(prios[j]), now)
        outcome = 1
      end
    end
    results[#results + 1] = id; results[#results + 1] = outcome; results[#results + 1] = n
  end
end
out[2] = (#out - 2) / 3  -- the entries set aside
-- writes: everything above was only read
local woke = leave_flight(ids)  -- told below
forget(gone)
if #reset > 0 then
  redis.call('HDEL', attempts, unpack(reset))
  redis.call('HDEL', runs, unpack(reset))
end
if #marks > 0 then call_many('HSET', runs, {}, marks) end
if #died > 0 then redis.call('ZADD', dead, unpack(died)) end
if line.earliest ~= nil then
  line.idle = false  -- told below whatever the line's state: workers may have slept
  line_write(line, pending, ready, ARGV[4])
end
if woke or line.earliest ~= nil then tell(ARGV[4], now) end
for j = 1, #results do out[#out + 1] = results[j] end
return out
