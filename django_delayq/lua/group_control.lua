-- group_control.lua : pause or resume one group of a grouped queue (docs/groups.md).
--
-- KEYS: group_ready:zset group_turns:zset group_paused:set group:hash
-- used, in that order (the names of keys.QueueKeys):
--          group_ready   ZSET  the due jobs indexed by group (lib.lua group_index)
--          group_turns   ZSET  group -> turn: the rotation
--          group_paused  SET   the paused groups: claim.lua takes none of their jobs
--          group         HASH  id -> group (not used here; lib.lua group_index names it)
-- ARGV[1]  op        "pause" or "resume"
-- ARGV[2]  group     the group id
-- ARGV[3]  channel   PUBLISH target, told now when a resumed group has due jobs
--
-- Pause: the group leaves the rotation and is marked paused (a job of it entering the due
-- set puts it back in the rotation, and the next claim that reads it takes it out again).
-- Resume: unmarked; a group with indexed due jobs joins the rotation at its end and the
-- queue's workers are told to claim.
-- Returns: 1 when the state changed, 0 when it was so already
-- Cost: a constant number of commands (one index read, two or three ZSET or SET writes),
--       each O(log N).
--@include now
--@include wrong_type
--@include group_index
local op, g = ARGV[1], ARGV[2]
if op == 'pause' then
  local added = redis.call('SADD', group_paused, g)
  redis.call('ZREM', group_turns, g)
  return added
end
local removed = redis.call('SREM', group_paused, g)
if removed == 1 and redis.call('ZRANGEBYLEX', group_ready, '[' .. g .. '\n',
                               '(' .. g .. '\11', 'LIMIT', 0, 1)[1] then
  join_turns({g})
  redis.call('PUBLISH', ARGV[3], string.format('%.0f', now_ms('0')))
end
return removed
