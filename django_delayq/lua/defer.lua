-- defer.lua : put jobs in flight back in line for later, their attempt given back (a
-- job a callable limit refused: not its fault).
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
-- ARGV[2]  channel   PUBLISH target when the queue's next claim moves earlier
-- ARGV[3..] triples: id, token, at_ms (the new due time; clamped to years 1..9999)
--
-- As release.lua with a new due time: the job is due at at_ms with its priority (lib.lua
-- give_back, line), its attempts count lowered by one. A stale token changes nothing.
-- Tokens and leases are read for the whole call before the first write.
-- Returns: one integer per triple: 1 deferred, 0 refused (lease lost)
-- Cost: at most 200 triples per call (scripts.MAX_DEFER; callers split bigger batches):
--       O(n log N); group slots: one HMGET and one ZREM, one index read per held group
--       (at most n).
--@include give_back
local out, line = give_back(pending, inflight, attempts, ready, prio, now_ms(ARGV[1]), ARGV[2])
if line ~= nil then line_write(line, pending, ready, ARGV[2]) end
return out
