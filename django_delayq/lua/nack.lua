-- nack.lua : settle failed jobs: back in line after a delay, or to dead.
--
-- KEYS: pending:zset inflight:zset jobs:hash attempts:hash cancel:set dead:zset
-- KEYS: ready:zset prio:hash urgent settled:zset settled_by:hash runs:hash group:hash
-- KEYS: group_ready:zset group_turns:zset group_running:zset group_held:zset
-- used, in that order (the names of keys.QueueKeys):
--          pending   ZSET  due_ms -> id
--          inflight  ZSET  lease_deadline_ms -> id
--          jobs      HASH  id -> envelope
--          attempts  HASH  id -> lease token
--          cancel    SET   ids whose cancel was asked while they ran
--          dead      ZSET  died_ms -> id
--          ready     ZSET  ready score -> id
--          prio      HASH  id -> priority (kept while the job lives, dead included)
--          settled     ZSET  id -> settled ms (a cancelled job, when ARGV[4] is not "")
--          settled_by  HASH  id -> "c <attempt> <holder>"
--          runs        HASH  id -> "<token> <offset> <streak>": the attempt is the token
--                      minus the offset; forgotten with the job
--          group_ready, group_turns (and group)  a grouped queue's index, its rotation
--                    (lib.lua group_index, written by line_write; docs/groups.md)
--          group_running, group_held  the settled jobs' group slots are freed and their
--                    held groups put back (lib.lua group_slots)
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target when a retry moves the queue's next claim earlier
-- ARGV[3]  dead_max  dead jobs kept; the oldest beyond it are dropped (at most 100 per call)
-- ARGV[4]  holder    the settling worker's registry id; "" = keep no record
-- ARGV[5..] triples: id, token, retry_delay_ms ("-1" = no retry: dead)
--
-- A retry keeps its priority: due already (delay 0), it goes straight to ready unless
-- pending holds a job due before it (lib.lua line). A job whose cancel was asked while it
-- ran is not retried: it is forgotten. Tokens, leases, cancel marks and priorities are
-- read for the whole call before the first write.
-- Returns: one integer per triple: 0 refused (lease lost), 1 retrying, 2 dead, 3 cancelled
-- Cost: at most 200 triples per call (scripts.MAX_NACK; callers split bigger batches):
--       O(n log N), plus at most 100 trimmed dead jobs; group slots: one HMGET
--       and one ZREM, one index read per held group (at most n).
--@include ms_range
--@include line
--@include forget
--@include record_settled
--@include offset
--@include group_slots
local now = now_ms(ARGV[1])
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
  for j = 1, #ids do
    local id = ids[j]
    local i = 3 * j + 2
    if not leased[j] or tokens[j] ~= ARGV[i + 1] or seen[id] then
      out[j] = 0
    else
      seen[id] = true
      settled[#settled + 1] = id
      local delay = tonumber(ARGV[i + 2])
      if cancelled[j] == 1 then
        dropped[#dropped + 1] = id
        records[#records + 1] = id
        records[#records + 1] = 'c ' .. string.format('%.0f', tonumber(ARGV[i + 1])
                                - offset_of(redis.call('HGET', runs, id), ARGV[i + 1]))
        out[j] = 3
      elseif delay >= 0 then
        enter(line, id, clamp_ms(now + delay), priority_of(prios[j]), now)
        out[j] = 1
      else
        died[#died + 1] = now
        died[#died + 1] = id
        out[j] = 2
      end
    end
  end
  leave_flight(settled, ARGV[2], now)
  forget(dropped)
  record_settled(ARGV[4], now, records)
  line_write(line, pending, ready, ARGV[2])
  if #died > 0 then call_many('ZADD', dead, {}, died) end
end
local excess = math.min(redis.call('ZCARD', dead) - tonumber(ARGV[3]), 100)
if excess > 0 then  -- the oldest dead jobs
  forget(redis.call('ZRANGE', dead, 0, excess - 1))
  redis.call('ZREMRANGEBYRANK', dead, 0, excess - 1)
end
return out
