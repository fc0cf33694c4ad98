-- give_back.lua : hand jobs in flight back, their attempt given back: claimed jobs that
-- never started (release: graceful shutdown), or jobs put back in line for later (defer:
-- a job a callable limit refused, not its fault).
--
-- KEYS: pending inflight attempts ready prio urgent runs group group_ready group_turns group_running group_held starts group_starts group_expiry
-- runs: the given-back attempt's offset + 1; the jobs' group slots are freed and their
-- held groups put back (lib.lua group_slots). starts, group_starts, group_expiry: a
-- deferred job's claim leaves the queue's and its group's rate windows (see below).
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  channel   PUBLISH target: release, told the earliest released due time; defer,
--                    when the queue's next claim moves earlier, or now when a held group
--                    is put back in an empty rotation
-- ARGV[3]  why       "release" or "defer"
-- ARGV[4..] quadruples: id, token, due_ms (release: the due time the job had when
--           claimed; defer: the new due time; clamped to years 1..9999), claimed_ms (the
--           claim's server time, the stamp of its window entries; -1: none to remove)
--
-- A job whose token is current goes back in line at due_ms with its priority (lib.lua
-- line), the attempt it was charged is given back and its group slot freed. The token
-- is not: the counter stays and the runs entry's offset grows by one (its start mark and
-- streak kept), so the next claim's token is new and its attempt number the same. A
-- lowered counter would hand the token out again, and the same give-back sent twice (a
-- lost reply, the call sent again) would take that next delivery from its worker. A
-- stale token changes nothing. Tokens, leases and runs entries are read for the whole
-- call before the first write.
-- Rate windows: a job given back with its claimed_ms (defer: it never started) takes
-- its claim out of the queue's rate window (starts: `<id>:<token>:<claimed_ms>`) and of
-- its group's (group_starts, group_expiry: `<group>\n<claimed_ms, 16 digits><id>:<token>`),
-- so a job a callable limit refused costs its queue and group no claim of their rate.
-- Returns: one integer per quadruple: 1 given back, 0 refused (lease lost)
-- Cost: at most 200 quadruples per call (scripts.MAX_GIVE_BACK; callers split bigger
--       batches): O(n log N), one HMGET and one HSET of runs; group slots: one HMGET
--       and one ZREM, one index read per held group (at most n); rate windows: one ZREM
--       of starts, and with group_starts one HMGET of group and two ZREM.
--@include line
--@include ms_range
--@include group_slots
--@include offset
local now = now_ms(ARGV[1])
local release = ARGV[3] == 'release'
local ids = {}
for i = 4, #ARGV, 4 do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return {} end
local held = redis.call('HMGET', attempts, unpack(ids))
local leased = redis.call('ZMSCORE', inflight, unpack(ids))
local prio_of = redis.call('HMGET', prio, unpack(ids))
local marked = redis.call('HMGET', runs, unpack(ids))
local line = new_line(pending, ready)  -- reads, before any write
local out, back, marks, seen, stamps = {}, {}, {}, {}, {}
for j = 1, #ids do
  local id = ids[j]
  local i = 4 * j
  if leased[j] and held[j] == ARGV[i + 1] and not seen[id] then
    seen[id] = true
    back[#back + 1] = id
    local token = tonumber(held[j])
    local k, streak = offset_of(marked[j], token)
    marks[#marks + 1] = id  -- attempt = token - offset: this delivery's is given back
    marks[#marks + 1] = (marked[j] and string.match(marked[j], '^(%d+) ') or '0') .. ' '
                        .. string.format('%.0f', math.min(k + 1, token)) .. ' ' .. streak
    enter(line, id, clamp_ms(tonumber(ARGV[i + 2])), priority_of(prio_of[j]), now)
    stamps[#back] = {tonumber(ARGV[i + 3]) or -1, held[j]}  -- its claim's time, its token
    out[j] = 1
  else
    out[j] = 0
  end
end
leave_flight(back, not release and ARGV[2] or nil, now)
if #marks > 0 then call_many('HSET', runs, {}, marks) end
-- the claims of the given-back jobs with a claimed_ms leave the rate windows (claim.lua
-- write_leases, lib.lua log_starts wrote them); group is read only with group_starts
local of_group = #back > 0 and redis.call('EXISTS', group_starts) == 1 and
                 redis.call('HMGET', group, unpack(back)) or {}
local unlog, unlog_g = {}, {}
for j, id in ipairs(back) do
  local claimed, token = stamps[j][1], stamps[j][2]
  if claimed >= 0 then
    unlog[#unlog + 1] = id .. ':' .. token .. ':' .. string.format('%.0f', claimed)
    local g = of_group[j]
    if g and g ~= '' then
      unlog_g[#unlog_g + 1] = g .. '\n' .. string.format('%016.0f', claimed) .. id .. ':' .. token
    end
  end
end
if #unlog > 0 then redis.call('ZREM', starts, unpack(unlog)) end
if #unlog_g > 0 then
  redis.call('ZREM', group_starts, unpack(unlog_g))
  redis.call('ZREM', group_expiry, unpack(unlog_g))
end
-- released jobs: told whatever the line's state (other workers take them)
if release then line.idle = false end
line_write(line, pending, ready, ARGV[2])
if release and line.earliest ~= nil then tell(ARGV[2], line.earliest) end
return out
