-- reenqueue.lua : the reconciler puts back jobs Redis does not hold; at most once per
-- job however many reconcilers find it missing at once, under a fresh lease token.
--
-- KEYS: pending inflight jobs attempts dead epoch ready prio urgent settled runs reconciled group group_ready group_turns hold
-- epoch is set, if absent, as enqueue.lua does; settled: a worker settled the job, its
-- row is coming; a job of hold waits in pending until its hold ends (lib.lua hold_back).
-- ARGV[1]  now_ms      integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel     PUBLISH target (lib.lua line_write)
-- ARGV[3]  keep_ms     how long a re-enqueue is remembered (ms)
-- ARGV[4]  keep_max    how many re-enqueued ids are remembered at most
-- ARGV[5]  expect      "" or the epoch the caller last saw: when the epoch key holds
--                      anything else (gone: the data was lost since), nothing is done
--                      and {0, now_ms, 1} comes back (a loss pass, which seeds the
--                      attempts a lost delivery may have had, is the one to put them back)
-- ARGV[6..] 5 per job: id, due_ms (absolute), priority (-100..100), group ("": none),
--           seed: the most attempts the job may have had (0: none; "": no seed, for a
--           job never delivered). A job with a seed (0 too) or a counter gets
--           the counter max(its value, now_ms, its last re-enqueue's ms + 1) — the Redis
--           clock in ms, above any token handed out in an earlier ms, so the next claim's
--           token is one no earlier delivery had, even when the old counter was lost —
--           and the runs entry "0 <counter - seed> 0", so its next attempt is seed + 1.
--           The counter kept, it is above every token (max with it); only when Redis lost
--           it does the clock alone stand above the earlier tokens: it does while the job
--           was delivered less than once a ms on average since its last clock seed (a
--           give-back or an immediate retry needs no lease to end: a job bouncing faster
--           between workers for longer could hand out a token the clock has not reached)
--           The reconciler seeds every job, 0 too: a job whose row says it never ran
--           may still have been delivered in data lost unseen (a copy held unstarted
--           there counted no attempt), so no token restarts from 1
--
-- A job is left alone (not counted) when Redis holds it (pending, ready, in flight,
-- dead, an envelope), holds a settled record of it, or re-enqueued it within keep_ms
-- (another reconciler found it missing in the same moment: it may have run and been
-- acked since). The reads and the writes are one script: two reconcilers cannot both
-- decide that a job is missing and both put it back.
-- Returns: {added, now_ms}, or {0, now_ms, 1} when ARGV[5] was not the epoch
-- Cost: at most 100 jobs per call (scripts.MAX_REENQUEUE, the reconciler's chunk; callers
--       split bigger batches): O(n log N); trimming `reconciled` removes at most 1,000
--       old ids.
--@include ms_range
--@include line
--@include held
local now = now_ms(ARGV[1])
local keep_ms, keep_max = tonumber(ARGV[3]), tonumber(ARGV[4])
if ARGV[5] ~= '' and redis.call('GET', epoch) ~= ARGV[5] then return {0, now, 1} end
local ids = {}
for i = 6, #ARGV, 5 do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return {0, now} end
local line = new_line(pending, ready)
local found, epoch_exists, _, holding = held(ids)
local dues = {}
for j = 1, #ids do dues[j] = clamp_ms(tonumber(ARGV[5 * j + 2])) end
hold_back(holding, ids, dues, now)
local in_settled = redis.call('ZMSCORE', settled, unpack(ids))
local lately = redis.call('ZMSCORE', reconciled, unpack(ids))
local counters = redis.call('HMGET', attempts, unpack(ids))
local prios, seeds, offsets, fresh, remembered, groups = {}, {}, {}, {}, {}, {}
local added = 0
for j = 1, #ids do
  local id = ids[j]
  local recently = lately[j] and tonumber(lately[j]) >= now - keep_ms
  if not (found[j] or in_settled[j] or recently) then
    added = added + 1
    local i = 5 * j + 1
    local priority = math.max(-100, math.min(100, math.floor(tonumber(ARGV[i + 2]) or 0)))
    enter(line, id, dues[j], priority, now)
    if priority ~= 0 then prios[#prios + 1] = id; prios[#prios + 1] = priority end
    if ARGV[i + 3] ~= '' then groups[#groups + 1] = id; groups[#groups + 1] = ARGV[i + 3] end
    local seed = math.max(0, math.floor(tonumber(ARGV[i + 4]) or 0))
    local counter = tonumber(counters[j]) or 0
    if ARGV[i + 4] ~= '' or counter > 0 then
      -- a later seed of the same job is higher even within the same ms (its last one is
      -- remembered in reconciled); with the counter lost, see the header on the clock
      local token = math.max(now, counter, (tonumber(lately[j]) or 0) + 1)
      seeds[#seeds + 1] = id; seeds[#seeds + 1] = string.format('%.0f', token)
      offsets[#offsets + 1] = id
      offsets[#offsets + 1] = '0 ' .. string.format('%.0f', math.max(0, token - seed)) .. ' 0'
    else
      fresh[#fresh + 1] = id  -- no delivery to count: no runs entry either
    end
    remembered[#remembered + 1] = now; remembered[#remembered + 1] = id
  end
end
if added > 0 then
  if #groups > 0 then call_many('HSET', group, {}, groups) end  -- before line_write indexes
  line_write(line, pending, ready, ARGV[2])
  if #prios > 0 then call_many('HSET', prio, {}, prios) end
  call_many('HSET', attempts, {}, seeds)  -- (no call for an empty list)
  call_many('HSET', runs, {}, offsets)
  if #fresh > 0 then redis.call('HDEL', runs, unpack(fresh)) end
  call_many('ZADD', reconciled, {}, remembered)
end
local old = redis.call('ZCOUNT', reconciled, '-inf', string.format('(%.0f', now - keep_ms))
local over = redis.call('ZCARD', reconciled) - keep_max
local drop = math.min(math.max(old, over), 1000)
if drop > 0 then redis.call('ZREMRANGEBYRANK', reconciled, 0, drop - 1) end
mark_epoch(epoch_exists)
return {added, now}
