-- group_control.lua : pause or resume one group of a grouped queue, or set or lift its
-- limits' override (docs/groups.md).
--
-- KEYS: group_ready group_turns group_paused group group_limits group_held group_running inflight
-- group, group_running and inflight are not used here: lib.lua group_index and
-- group_slots name them.
-- ARGV[1]  op        "pause", "resume", "limit" or "unlimit"
-- ARGV[2]  group     the group id
-- ARGV[3]  channel   PUBLISH target, told now when a resumed group has due jobs
-- ARGV[4]  limits    ("limit") "<rate> <per_ms> <concurrency>", each a whole number, -1
--                    for the queue's default
--
-- Pause: the group leaves the rotation and is marked paused (a job of it entering the due
-- set puts it back in the rotation, and the next claim that reads it takes it out again).
-- Resume: unmarked; a group with indexed due jobs joins the rotation at its end and the
-- queue's workers are told to claim.
-- Limit / unlimit: the override is written / removed; a group a limit held out of the
-- rotation is put back at its end (the next claim weighs it against its new limits)
-- and the workers are told when it has due jobs and is not paused.
-- Returns: 1 when the state changed, 0 when it was so already
-- Cost: a constant number of commands (one index read, two or three ZSET, SET or HASH
--       writes), each O(log N).
--@include group_slots
local op, g = ARGV[1], ARGV[2]
if op == 'pause' then
  local added = redis.call('SADD', group_paused, g)
  redis.call('ZREM', group_turns, g)
  return added
end
if op == 'limit' or op == 'unlimit' then
  local changed
  if op == 'limit' then
    changed = redis.call('HGET', group_limits, g) ~= ARGV[4] and 1 or 0
    redis.call('HSET', group_limits, g, ARGV[4])
  else
    changed = redis.call('HDEL', group_limits, g)
  end
  if unhold({g}) and redis.call('SISMEMBER', group_paused, g) == 0 then
    tell(ARGV[3], now_ms('0'))
  end
  return changed
end
local removed = redis.call('SREM', group_paused, g)
if removed == 1 and group_entries(g, 1)[1] then
  join_turns({g})
  tell(ARGV[3], now_ms('0'))
end
return removed
