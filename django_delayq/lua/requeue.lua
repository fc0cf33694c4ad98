-- requeue.lua : give a dead job a fresh set of attempts.
--
-- KEYS: pending:zset attempts:hash dead:zset ready:zset prio:hash urgent runs:hash
-- KEYS: group:hash group_ready:zset group_turns:zset
-- used, in that order (the names of keys.QueueKeys):
--          pending   ZSET  due_ms -> id
--          attempts  HASH  id -> lease token
--          dead      ZSET  died_ms -> id
--          ready     ZSET  ready score -> id
--          prio      HASH  id -> priority (kept while the job was dead)
--          runs      HASH  id -> "<token> <offset> <streak>" (start marks): forgotten
--          group_ready, group_turns (and group)  a grouped queue's index, its rotation
--                    (lib.lua group_index, written by line_write; docs/groups.md)
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target when the job moves the queue's next claim earlier
-- ARGV[3]  id
-- ARGV[4]  delay_ms
--
-- The attempt counter restarts at 0, so the job gets its max_attempts again; it keeps
-- its priority and goes back in line (lib.lua line).
-- Returns: {outcome, due_ms}  outcome 1 requeued, 0 not in dead
-- Cost: O(log N), one job per call.
--@include ms_range
--@include line
local now = now_ms(ARGV[1])
local id = ARGV[3]
if not redis.call('ZSCORE', dead, id) then return {0, -1} end
local due = clamp_ms(now + tonumber(ARGV[4]))
local line = new_line(pending, ready)
enter(line, id, due, priority_of(redis.call('HGET', prio, id)), now)
redis.call('ZREM', dead, id)
redis.call('HDEL', attempts, id)
redis.call('HDEL', runs, id)  -- a requeued job starts its attempts afresh
line_write(line, pending, ready, ARGV[2])
return {1, due}
