-- inspect.lua : where one job is, read atomically (admin, tests, reconciler).
--
-- KEYS: pending inflight jobs attempts cancel dead ready prio runs
-- ARGV[1]  id
--
-- Returns: {place, score, attempts, envelope or false, cancel_requested, priority}
--          place: "pending" (pending or ready) | "inflight" | "dead" | "" (not in Redis)
--          score: the due time (of a ready job, as ready_score keeps it: 1970..2527), the
--          lease deadline or the time of death; -1 when it is not a time (+-inf);
--          attempts: the attempt number of its latest delivery (its lease token minus the
--          runs entry's offset; 0 before the first, also after a re-enqueue that counted
--          none), -1 when the token is not an integer;
--          priority 0 when none (or not one)
-- Cost: O(log N), one job per call.
--@include ms_range
--@include poison
--@include priority
--@include offset
local id = ARGV[1]
local place, score = '', -1
local in_ready = redis.call('ZSCORE', ready, id)
if in_ready then
  place, score = 'pending', ready_due(in_ready) or -1
else
  for _, where in ipairs({{'pending', pending}, {'inflight', inflight}, {'dead', dead}}) do
    local s = redis.call('ZSCORE', where[2], id)
    if s then place, score = where[1], as_ms(s) or -1; break end
  end
end
local count = redis.call('HGET', attempts, id)
local tries = 0
local entry = count and redis.call('HGET', runs, id)
if count and entry ~= '0 ' .. count .. ' 0' then  -- that entry: re-enqueued with seed 0
  tries = bad_count(count) and -1                  -- (reenqueue.lua), not delivered since
          or math.max(0, tonumber(count) - offset_of(entry, count))
end
return {place, score, tries, redis.call('HGET', jobs, id),
        redis.call('SISMEMBER', cancel, id), priority_of(redis.call('HGET', prio, id))}
