-- ack.lua : settle finished jobs (success, or expired before it ran): forget them, and
-- record how they ended until their worker's audit row has landed.
--
-- KEYS: inflight jobs attempts cancel prio urgent settled settled_by runs group group_running group_held group_ready group_turns
-- settled and settled_by are written only with a holder (ARGV[2]); the acked jobs' group
-- slots are freed and their held groups put back (lib.lua group_slots).
-- ARGV[1]  now_ms      integer ms, or "0" to read the server's TIME
-- ARGV[2]  holder      the settling worker's registry id; "" = keep no record
-- ARGV[3]  channel     PUBLISH target, told now when a held group is put back in an
--                      empty rotation (the queue's workers may all be waiting)
-- ARGV[4..] triples: id, token, code ("s" succeeded, "x" expired)
--
-- An ack whose token is stale (the lease expired and the job was recovered or
-- claimed again) is refused and changes nothing. Tokens and leases are read for the
-- whole call (HMGET, ZMSCORE) before the first write.
-- Key types: the reads meet attempts, inflight and runs (with a holder): one of the wrong
-- type ends the call there, with wrong_type's reply. Before the first write one EXISTS
-- reads whether any of cancel, prio, urgent and the group keys exists (none does in a
-- queue without cancels, priorities or groups: nothing is written there either); then the
-- keys still unchecked (jobs, settled, settled_by, and those the EXISTS found) are typed
-- (TYPE each; jobs absent, as django-delayq leaves it, is not written either). With a
-- holder, the runs entries read are the only ones deleted: a plain call of a plain queue
-- runs 12 commands (13 when a start mark came before the ack, 14 with envelopes), not 28.
-- Returns: one integer per triple: 1 acked, 0 refused (lease lost)
-- Cost: at most 250 triples per call (scripts.MAX_ACK; callers split bigger batches):
--       O(n log N); group slots: one HMGET and one ZREM, one index read per held group
--       (at most n).
--@include wrong_type
--@include forget
--@include record_settled
--@include offset
--@include group_slots
local now = now_ms(ARGV[1])
local holder = ARGV[2]
local ids = {}
for a = 4, #ARGV, 3 do ids[#ids + 1] = ARGV[a] end
if #ids == 0 then return {} end
local read, tokens, leased, marked = pcall(function()
  return redis.call('HMGET', attempts, unpack(ids)), redis.call('ZMSCORE', inflight, unpack(ids)),
         holder ~= '' and redis.call('HMGET', runs, unpack(ids)) or {}
end)
if not read then return read_failed(KINDS, tokens) end
local out, done, seen, records, unmark = {}, {}, {}, {}, {}
for j = 1, #ids do
  local id = ids[j]
  local i = 3 * j + 1
  if leased[j] and tokens[j] == ARGV[i + 1] and not seen[id] then
    seen[id] = true
    done[#done + 1] = id
    records[#records + 1] = id
    local attempt = ARGV[i + 1]  -- the token (claim.lua's integer): no runs entry, no offset
    if marked[j] then
      attempt = string.format('%.0f', tonumber(attempt) - offset_of(marked[j], attempt))
      unmark[#unmark + 1] = id
    end
    records[#records + 1] = ARGV[i + 2] .. ' ' .. attempt
    records[#records + 1] = ARGV[i + 1]
    out[j] = 1
  else
    out[j] = 0
  end
end
if #done == 0 then return out end
local rare = {cancel, prio, urgent, group, group_running, group_held, group_ready, group_turns}
local plain = redis.call('EXISTS', unpack(rare)) == 0
local envelopes = redis.call('TYPE', jobs)['ok']  -- 'none': no HDEL of jobs either
local known = {[attempts] = true, [inflight] = true}
known[jobs] = envelopes == 'none' or envelopes == 'hash'  -- else wrong_type says so
if holder ~= '' then known[runs] = true else known[settled], known[settled_by] = true, true end
if plain then for _, key in ipairs(rare) do known[key] = true end end
local err = wrong_type(KINDS, known)
if err then return err end
leave_flight(done, ARGV[3], now, plain)
-- plain: nothing of these jobs in cancel, prio, urgent or group; runs read with a holder
forget(done, plain and {jobs = envelopes ~= 'none', runs = holder ~= '' and unmark or nil})
record_settled(holder, now, records)
return out
