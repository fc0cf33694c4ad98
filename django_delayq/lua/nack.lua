-- nack.lua : settle failed jobs: back in line after a delay, or to dead.
--
-- KEYS: pending inflight jobs attempts cancel dead ready prio urgent settled settled_by runs group group_ready group_turns group_running group_held nacked?
-- settled and settled_by record a cancelled job (with a holder, ARGV[4]); the settled
-- jobs' group slots are freed and their held groups put back (lib.lua group_slots);
-- nacked (optional: keys.QueueKeys.nack_record) is kept an hour after its last write
-- (NACKED_KEEP_MS), at most 1,000 jobs.
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target when a retry moves the queue's next claim earlier
-- ARGV[3]  dead_max  dead jobs kept; the oldest beyond it are dropped (at most 100 per call)
-- ARGV[4]  holder    the settling worker's registry id (with nacked); "" = keep no record
-- ARGV[5..] triples: id, token, retry_delay_ms ("-1" = no retry: dead)
--
-- A retry keeps its priority: due already (delay 0), it goes straight to ready unless
-- pending holds a job due before it (lib.lua line). A job whose cancel was asked while it
-- ran is not retried: it is forgotten. Tokens, leases, cancel marks and priorities are
-- read for the whole call before the first write.
-- A nack sent again after its reply was lost (a timeout while Redis stalled, a dropped
-- connection: the first send ran) finds its tokens no longer in flight. With a holder
-- and its record (nacked), each job settled is recorded there with its token and result,
-- and a triple refused is answered from the record when it holds that job under that
-- token: the result the first send gave (changing nothing), not 0. A record that would
-- pass 1,000 jobs (NACKED_MAX: a worker failing jobs without an hour's pause never lets
-- it expire) is dropped before the call's write: the call's own jobs are recorded after.
-- Returns: one integer per triple: 0 refused (lease lost), 1 retrying, 2 dead, 3 cancelled
-- Cost: at most 200 triples per call (scripts.MAX_NACK; callers split bigger batches):
--       O(n log N), plus at most 100 trimmed dead jobs; group slots: one HMGET
--       and one ZREM, one index read per held group (at most n); with the record: one
--       HLEN, one HSET (every job settled) and one PEXPIRE when a job was settled (a
--       DEL when it is full), one HMGET when a triple was refused.
--@include ms_range
--@include line
--@include forget
--@include record_settled
--@include offset
--@include group_slots
local NACKED_KEEP_MS, NACKED_MAX = 3600000, 1000  -- the record: kept an hour, 1,000 jobs
local now = now_ms(ARGV[1])
local keep = nacked ~= nil and ARGV[4] ~= ''  -- a record of this holder's nacks
local ids = {}
for i = 5, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
local out = {}
if #ids > 0 then
  local tokens = redis.call('HMGET', attempts, unpack(ids))
  local leased = redis.call('ZMSCORE', inflight, unpack(ids))
  local cancelled = redis.call('SMISMEMBER', cancel, unpack(ids))
  local prios = redis.call('HMGET', prio, unpack(ids))
  local line = new_line(pending, ready)
  local settled, dropped, died, seen, records = {}, {}, {}, {}, {}
  local refused, nacks = {}, {}  -- the triples refused; this call's record (id, value)
  for j = 1, #ids do
    local id = ids[j]
    local i = 3 * j + 2
    if not leased[j] or tokens[j] ~= ARGV[i + 1] or seen[id] then
      out[j] = 0
      refused[#refused + 1] = j
    else
      seen[id] = true
      settled[#settled + 1] = id
      local delay = tonumber(ARGV[i + 2])
      if cancelled[j] == 1 then
        dropped[#dropped + 1] = id
        records[#records + 1] = id
        records[#records + 1] = 'c ' .. string.format('%.0f', tonumber(ARGV[i + 1])
                                - offset_of(redis.call('HGET', runs, id), ARGV[i + 1]))
        records[#records + 1] = ARGV[i + 1]
        out[j] = 3
      elseif delay >= 0 then
        enter(line, id, clamp_ms(now + delay), priority_of(prios[j]), now)
        out[j] = 1
      else
        died[#died + 1] = now
        died[#died + 1] = id
        out[j] = 2
      end
      nacks[#nacks + 1] = id
      nacks[#nacks + 1] = ARGV[i + 1] .. ' ' .. out[j]
    end
  end
  if keep and #refused > 0 then  -- sent again after a lost reply: the first send's result
    local asked = {}
    for r = 1, #refused do asked[r] = ids[refused[r]] end
    local kept = redis.call('HMGET', nacked, unpack(asked))
    for r = 1, #refused do
      local token, result = string.match(kept[r] or '', '^(%S+) ([123])$')
      if token ~= nil and token == ARGV[3 * refused[r] + 3] then
        out[refused[r]] = tonumber(result)
      end
    end
  end
  leave_flight(settled, ARGV[2], now)
  forget(dropped)
  record_settled(ARGV[4], now, records)
  line_write(line, pending, ready, ARGV[2])
  if #died > 0 then call_many('ZADD', dead, {}, died) end
  if keep and #nacks > 0 then
    if redis.call('HLEN', nacked) + #nacks / 2 > NACKED_MAX then redis.call('DEL', nacked) end
    redis.call('HSET', nacked, unpack(nacks))
    redis.call('PEXPIRE', nacked, NACKED_KEEP_MS)
  end
end
local excess = math.min(redis.call('ZCARD', dead) - tonumber(ARGV[3]), 100)
if excess > 0 then  -- the oldest dead jobs
  forget(redis.call('ZRANGE', dead, 0, excess - 1))
  redis.call('ZREMRANGEBYRANK', dead, 0, excess - 1)
end
return out
