-- release.lua : hand back claimed jobs that never started (graceful shutdown).
--
-- KEYS: pending:zset inflight:zset attempts:hash ready:zset prio:hash urgent
-- KEYS: group:hash group_ready:zset group_turns:zset group_running:zset group_held:zset
-- used, in that order (the names of keys.QueueKeys):
--          pending   ZSET  due_ms -> id
--          inflight  ZSET  lease_deadline_ms -> id
--          attempts  HASH  id -> lease token
--          ready     ZSET  ready score -> id
--          prio      HASH  id -> priority
--          group_ready, group_turns (and group)  a grouped queue's index, its rotation
--                    (lib.lua group_index, written by line_write; docs/groups.md)
--          group_running, group_held  the jobs' group slots are freed and their held
--                    groups put back (lib.lua group_slots, through give_back)
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target, told the earliest released due time
-- ARGV[3..] triples: id, token, due_ms (the due time the job had when claimed)
--
-- The claim is undone: the job is back in line at its old due time with its priority
-- (lib.lua give_back, line) and the attempt it was charged is given back. A stale token
-- changes nothing. Tokens and leases are read for the whole call before the first write.
-- Returns: one integer per triple: 1 released, 0 refused (lease lost)
-- Cost: at most 200 triples per call (scripts.MAX_RELEASE; callers split bigger
--       batches): O(n log N); group slots: one HMGET and one ZREM, one index read
--       per held group (at most n).
--@include give_back
local out, line = give_back(pending, inflight, attempts, ready, prio, now_ms(ARGV[1]))
if line ~= nil and line.earliest ~= nil then
  line.idle = false  -- told below whatever the line's state: other workers take them
  line_write(line, pending, ready, ARGV[2])
  tell(ARGV[2], line.earliest)
end
return out
