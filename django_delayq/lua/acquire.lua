-- acquire.lua : may job `id` start now under its callable's limits? (callable limits)
--
-- KEYS: grants running next_free refusals
-- ARGV[1]  now_ms     integer ms, or "0" to read the server's TIME
-- ARGV[2]  id         the job asking
-- ARGV[3]  lease_ms   how long its slot lasts unless released (release_callable.lua): the
--                     slot of a dead worker frees itself then
-- ARGV[4]  rate       most grants per window ("-1": no rate limit)
-- ARGV[5]  per_ms     the window
-- ARGV[6]  concurrency  most slots held at once ("-1": no concurrency limit)
-- ARGV[7]  margin_ms  added to the window when counting grants (see below)
-- ARGV[8]  spread_ms  retry step of jobs refused for concurrency (a slot frees at an
--                     unknown time)
-- ARGV[9]  most_wait_ms  the longest back-off of a job refused for concurrency
--
-- Rate: a grant is refused while `rate` grants lie in the last per_ms + margin_ms ms, so
-- there are at most `rate` grants in any window of per_ms + margin_ms on the Redis clock.
-- The margin covers the delay between a grant and the call it allows: if every call
-- starts within margin_ms after its grant, at most `rate` calls start in any window of
-- per_ms (two grants `rate` apart are per_ms + margin_ms apart; their calls at least
-- per_ms). Concurrency: a grant takes a slot (running) until release_callable.lua frees it
-- or its deadline passes; expired slots are dropped first (at most 100 per call; the
-- count of live ones is exact either way). A job already holding a slot is granted again
-- (its deadline renewed, nothing counted twice).
-- Refused: retry_at_ms is when a start is likely to be granted, spread so that refused
-- jobs do not all come back at once: the later of when the window opens (or now + a
-- back-off for concurrency) and `next_free`, which then moves on by (per_ms + margin_ms) /
-- rate (or spread_ms): 200 jobs refused at 10/s get retry times ~105 ms apart. The
-- back-off: `refusals` counts the concurrency refusals since the last grant (k), and the
-- k-th waits spread_ms * 2^(k-1), at most most_wait_ms (50 ms, 100, 200 ... 1 s by
-- default; `refusals` lives 10 most_wait_ms past the last refusal): jobs waiting for a
-- long call's slot come back about once most_wait_ms each (later when spread behind
-- more of them), not in a loop, and a freed slot is taken within about that time.
-- Returns: {granted (1/0), retry_at_ms (-1 when granted), now_ms}
-- Cost: one job per call, O(log N) per command: at most 100 expired slots and 1,000 old
--       window entries dropped per call; O(1) for `refusals` (GET and SET, or DEL).
--@include now
--@include trim_log
local now = now_ms(ARGV[1])
local id, lease_ms = ARGV[2], tonumber(ARGV[3])
local rate, window = tonumber(ARGV[4]), tonumber(ARGV[5]) + tonumber(ARGV[7])
local conc, spread, most_wait = tonumber(ARGV[6]), tonumber(ARGV[8]), tonumber(ARGV[9])
local deadline = string.format('%.0f', now + lease_ms)
local stamp = string.format('%.0f', now)
trim_log(running, now, 100)
if conc >= 0 and redis.call('ZSCORE', running, id) then
  redis.call('ZADD', running, 'XX', deadline, id)
  return {1, -1, now}
end
local opens = nil
local full = conc >= 0 and redis.call('ZCOUNT', running, '(' .. stamp, '+inf') >= conc
local cutoff = now - window
if rate >= 1 then
  local from = '(' .. string.format('%.0f', cutoff)
  local in_window = redis.call('ZCOUNT', grants, from, '+inf')
  if in_window >= rate then
    opens = window_opens(grants, cutoff, in_window - rate, window, now)
  end
end
if opens == nil and not full then
  if rate >= 1 then
    redis.call('ZADD', grants, stamp, id .. ':' .. stamp)
    trim_log(grants, cutoff, 1000)
  end
  if conc >= 0 then
    redis.call('ZADD', running, deadline, id)
    redis.call('DEL', refusals)  -- a start: the next refusal's back-off starts over
  end
  return {1, -1, now}
end
local wait = spread
if opens == nil then  -- full: the k-th refusal since the last grant backs off
  local k = tonumber(redis.call('GET', refusals))  -- not INCR: a planted value is no count
  k = (k and k == k and k >= 0 and math.min(k, 1000) or 0) + 1
  redis.call('SET', refusals, string.format('%.0f', math.floor(k)), 'PX',
             string.format('%.0f', 10 * math.max(most_wait, spread, 1)))
  wait = math.max(spread, math.min(spread * 2 ^ math.min(k - 1, 30), most_wait))
end
local step = opens and math.ceil(window / rate) or spread
-- a next free slot beyond a day (or not a number) is not one this script wrote for a
-- live backlog: ignored, so a planted value cannot park the callable's jobs for years
local free = tonumber(redis.call('GET', next_free))
if free == nil or free ~= free or free > now + 86400000 then free = 0 end
local at = math.max(opens or now + wait, free)
redis.call('SET', next_free, string.format('%.0f', at + step), 'PX',
           string.format('%.0f', at + step - now + window))
return {0, at, now}
