-- defer.lua : put jobs in flight back in line for later, their attempt given back (a
-- job a callable limit refused: not its fault).
--
-- KEYS[1]..[16]  the queue's keys, in their one order (keys.QueueKeys.script_keys); used:
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[4]  attempts  HASH  id -> lease token
-- KEYS[8]  ready     ZSET  ready score -> id
-- KEYS[9]  prio      HASH  id -> priority
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target when the queue's next claim moves earlier
-- ARGV[3..] triples: id, token, at_ms (the new due time; clamped to years 1..9999)
--
-- As release.lua with a new due time: the job is due at at_ms with its priority (lib.lua
-- give_back, line), its attempts count lowered by one. A stale token changes nothing.
-- Tokens and leases are read for the whole call before the first write.
-- Returns: one integer per triple: 1 deferred, 0 refused (lease lost)
-- Cost: at most 200 triples per call (scripts.MAX_DEFER; callers split bigger batches):
--       O(n log N).
--@include now
--@include wrong_type
--@include give_back
local pending, inflight, attempts, ready, prio = KEYS[1], KEYS[2], KEYS[4], KEYS[8], KEYS[9]
local err = wrong_type({'zset', 'zset', '', 'hash', '', '', '', 'zset', 'hash'})
if err then return err end
local out, line = give_back(pending, inflight, attempts, ready, prio, now_ms(ARGV[1]))
if line ~= nil then line_write(line, pending, ready, ARGV[2]) end
return out
