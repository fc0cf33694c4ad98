-- enqueue.lua : add jobs to a queue; idempotent by job id.
--
-- KEYS: pending inflight jobs dead epoch ready prio urgent group group_ready group_turns hold
-- epoch is set, if absent, whenever jobs are given (lib.lua mark_epoch); a job of hold
-- waits in pending until its hold ends (lib.lua hold_back), whatever its own due time.
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target, told the due time when the queue's next claim moves
--                    earlier (lib.lua line_write)
-- ARGV[3..] 6 per job: id, at_ms (absolute; "-1" = use now_ms + delay_ms), delay_ms,
--           envelope ("" = the payload lives outside Redis, e.g. in the audit row: only
--           the id is stored, ~130 bytes a pending job instead of ~250), priority
--           (-100..100, a value beyond is taken as the nearest; 0 stores nothing more),
--           group ("" = none, stores nothing more)
--
-- A job whose id is already known (pending, ready, in flight, dead, or with an envelope),
-- or repeated within the call, is left alone. Due times are clamped to years 1..9999.
-- A job due already goes straight to ready unless pending holds a job due before it
-- (lib.lua line). Everything is read (ZMSCORE; one EXISTS for the epoch, the envelopes,
-- inflight, ready and dead, each of these read only when it exists, HMGET) before the
-- first write; a plain call reads whether the queue is idle only when its earliest job
-- comes before the head of pending (lib.lua line_reads: else no wake-up depends on it).
-- A delayed schedule() (one plain job due later than now: it can only go to pending;
-- one due now, schedule()'s default, takes the general path) takes the short path below, before the line's blocks are defined (a script's
-- whole text runs at each call: every function it includes is made anew). Its commands:
-- TIME, the head of pending (ZRANGE: a wake-up depends on it), the one EXISTS and a
-- ZSCORE (HEXISTS: jobs) of each key it found, the EXISTS of the cancel holds, then ZADD NX, which adds the job only if
-- pending does not hold it (its reply says which: pending's scores are not read); then,
-- as any call, the wake-up (when the job comes first and ready exists, whether the queue
-- is idle: EXISTS of group, and of group_turns when grouped) and the epoch. A read of it meeting a wrong type hands the
-- call to the general path, which reads again and replies wrong_type's error.
-- The clock is the server's TIME (ARGV[1] "0"; tests pass their own), not the caller's:
-- a delay counts from the clock every claim compares due times with, whichever host sent
-- the job (a web host's clock off by a second would shift its jobs by that much), and
-- whether a job is due already (ready or pending) is asked of that clock too.
-- Key types: a plain call (no envelope, priority 0, no group) writes only keys its reads
-- met or found absent (pending or ready; the epoch only when absent) unless a job
-- goes to ready in a grouped queue (index_ready); a read meeting a wrong type ends it,
-- before any write, with wrong_type's reply. Any other call checks every key's type (TYPE
-- each) after its reads, before its first write.
-- Returns: {added, now_ms}
-- Cost: at most 200 jobs per call (scripts.MAX_ENQUEUE; callers split bigger batches):
--       O(n log N), independent of the backlog size.
--@include ms_range
--@include held
--@include priority
--@include idle
local now = now_ms(ARGV[1])
if #ARGV == 8 and ARGV[6] == '' and ARGV[7] == '0' and ARGV[8] == '' then
  local id, at = ARGV[3], tonumber(ARGV[4])
  local due = at and clamp_ms(at < 0 and now + tonumber(ARGV[5]) or at)
  if due and due > now then  -- the short path (see above)
    local read, head, found, epoch_exists, ready_exists, holding = pcall(function()
      return pending_head(pending), held_one(id)
    end)
    -- else a key of the wrong type: the general path tells which; a cancel hold: the
    -- general path moves the due time (while the queue has one: the key expires when
    -- its last hold ends, at most 5 minutes after such a cancel)
    if read and not holding then
      local added, first = 0, head_due(head)
      if not found then
        local idle = (first == nil or due < first) and queue_idle(ready_exists)
        added = redis.call('ZADD', pending, 'NX', due, id)  -- 0: pending held it
        if added == 1 and idle then tell(ARGV[2], due) end
      end
      mark_epoch(epoch_exists)
      return {added, now}
    end
  end
end
--@include line
local function priority_at(i)
  return math.max(-100, math.min(100, math.floor(tonumber(ARGV[i + 4]) or 0)))
end
local ids, dues, plain = {}, {}, true
for i = 3, #ARGV, 6 do
  ids[#ids + 1] = ARGV[i]
  local due = tonumber(ARGV[i + 1])
  dues[#dues + 1] = clamp_ms(due < 0 and now + tonumber(ARGV[i + 2]) or due)
  plain = plain and ARGV[i + 3] == '' and ARGV[i + 5] == '' and priority_at(i) == 0
end
if #ids == 0 then return {0, now} end
local read, line, found, epoch_exists, ready_exists = pcall(function()
  local l = new_line(pending, ready, plain)
  local f, e, r, holding = held(ids)
  hold_back(holding, ids, dues, now)
  return l, f, e, r
end)
if not read then return read_failed(KINDS, line) end
local envs, prios, groups = {}, {}, {}
local added = 0
for j = 1, #ids do
  local id = ids[j]
  if not found[j] then
    added = added + 1
    local i = 6 * j - 3
    local priority = priority_at(i)
    enter(line, id, dues[j], priority, now)
    if ARGV[i + 3] ~= '' then envs[#envs + 1] = id; envs[#envs + 1] = ARGV[i + 3] end
    if priority ~= 0 then prios[#prios + 1] = id; prios[#prios + 1] = priority end
    if ARGV[i + 5] ~= '' then groups[#groups + 1] = id; groups[#groups + 1] = ARGV[i + 5] end
  end
end
-- the first write: a call that may write a key its reads did not meet checks every type
-- (a plain call writes no group: whether the queue is grouped, read once, holds for
-- line_write's index too)
if plain then
  line_reads(line, ready_exists)
  if #line.to_ready > 0 then line.grouped = redis.call('EXISTS', group) == 1 end
end
local err = (not plain or line.grouped) and wrong_type(KINDS)
if err then return err end
if #groups > 0 then call_many('HSET', group, {}, groups) end  -- before line_write indexes
line_write(line, pending, ready, ARGV[2])
if #envs > 0 then call_many('HSET', jobs, {}, envs) end
if #prios > 0 then call_many('HSET', prio, {}, prios) end
mark_epoch(epoch_exists)
return {added, now}
