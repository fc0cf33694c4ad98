-- lib.lua : the blocks the scripts share (not a script itself).
--
-- Each block starts at a line "--@define <name>" and runs to the next such line. A script
-- names the blocks it needs with "--@include <name>" lines after its header; scripts.load
-- replaces each of those lines with its block (whose own --@include lines are filled the
-- same way), puts each block at most once in a script, and refuses a name not defined
-- here. The text above the first block is not sent to Redis.
--
-- Keys: a script's one "-- KEYS:" line names the keys it is given, in the order of its
-- KEYS, by their names in engine/keys.py, which says once what each holds and its Redis
-- type; scripts.load makes the names locals of the script (the blocks below use them)
-- and checks the types (wrong_type) before the script's first write.
--
-- Every script reads and checks what it found in Redis before its first write, so a
-- value planted by hand (or by a bug) can never make it fail half-way: Redis does not
-- roll a script back, and a script that errors after a write has committed that write.
-- A script includes the blocks it calls, except those another of its includes brings
-- already; scripts.load brings wrong_type itself (with the check of the declared types).
--   * wrong_type: a key of the wrong type ends the script before any write, with the
--     error "DELAYQ-WRONGTYPE <KEYS index> <found> <expected>"; the Python side moves
--     that key aside and runs the script again (scripts.Script).
--   * poison (bad_id, bad_count) / ms_range (as_ms): a job id, an attempts value or a
--     score that cannot be what django-delayq wrote; the scripts set such an entry
--     aside, alone.

--@define ms_range
-- Times in ms: what a datetime can hold (years 1..9999); string forms for score ranges
-- (Lua prints numbers with 14 digits, too few for these); a score as a time (as_ms), a
-- number kept to the range (clamp_ms).
local MIN_MS, MAX_MS = -62135596800000, 253402300799999
local MIN_MS_ARG, MAX_MS_ARG = '-62135596800000', '253402300799999'

-- A score as integer ms, or nil when it is not a time (+-inf, out of a datetime's range).
local function as_ms(score)
  local n = tonumber(score)
  if n == nil or n ~= n or n < MIN_MS or n > MAX_MS then return nil end
  return math.floor(n)
end

-- A number kept within that range, as integer ms (nan: the earliest).
local function clamp_ms(n)
  if n ~= n or n < MIN_MS then return MIN_MS end
  if n > MAX_MS then return MAX_MS end
  return math.floor(n)
end

--@define now
-- The server's clock, {seconds, microseconds}. A script that reads TIME and then writes
-- must be replicated as its effects, not run again on the replica: on Redis 6.2 (which a
-- server may be told to replicate scripts verbatim) redis.replicate_commands() asks for
-- that; Redis 7 always does it and keeps the call as a no-op.
local function server_time()
  if redis.replicate_commands then redis.replicate_commands() end
  return redis.call('TIME')
end

-- A TIME reply in integer ms.
local function time_ms(t)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The script's "now" in integer ms: the caller's ARGV value, or the server's TIME when
-- that value is "0" (production; tests pass their own now).
local function now_ms(arg)
  local now = tonumber(arg)
  if now == 0 then now = time_ms(server_time()) end
  return now
end

-- Tells the queue's workers on their wake channel `channel` a time `ms` (when a job is
-- due, or now: claim now).
local function tell(channel, ms)
  redis.call('PUBLISH', channel, string.format('%.0f', ms))
end

--@define wrong_type
-- KEYS[i] must be of type kinds[i] (or absent); '' = not used by this script, not checked.
-- ``known`` (optional): a set of key names the caller knows to be fine (a read met them,
-- or they are absent), not checked again. ``kinds.order`` (scripts.load sets it): the
-- indices in the order to check them, one byte each (a constant: nothing built per call),
-- the keys a busy queue always has first. With three keys or more to check, one EXISTS
-- counts those that exist and a TYPE each is read only until that many were met: the
-- keys left are absent (a plain queue's claim types 5 keys, not 22). Every key that
-- exists is typed: the check is as strict as a TYPE each.
local function wrong_type(kinds, known)
  local order, todo, names = kinds.order or '', {}, {}  -- the indices to check, their keys
  for j = 1, #kinds do
    local i = string.byte(order, j) or j
    local key = KEYS[i]
    if kinds[i] ~= '' and not (known and known[key]) then
      todo[#todo + 1] = i
      names[#names + 1] = key
    end
  end
  local left = #names
  if left > 2 then left = redis.call('EXISTS', unpack(names)) end
  for t, i in ipairs(todo) do
    if left == 0 then return nil end
    local found = redis.call('TYPE', names[t])['ok']
    if found ~= 'none' then
      left = left - 1
      if found ~= kinds[i] then
        return redis.error_reply('DELAYQ-WRONGTYPE ' .. i .. ' ' .. found .. ' ' .. kinds[i])
      end
    end
  end
  return nil
end

-- A read of the script's that failed (pcall's error `err`): wrong_type's reply when a key
-- is of the wrong type (nothing was written yet), else Redis's own error as it gave it
-- (`OOM ...`, `READONLY ...`: error() would put its place in front, and the client
-- would no longer know its kind; Redis 6 puts one in front of a call's error too).
local function read_failed(kinds, err)
  local found = wrong_type(kinds)
  if found then return found end
  local text = type(err) == "table" and err.err or tostring(err)
  return redis.error_reply((string.gsub(text, "^@?user_script:? ?%d+: %-?", "")))
end

--@define poison
-- What cannot be an entry django-delayq wrote (a job id: bad_id; an attempts value:
-- bad_count), and an entry shown for the caller's log (shown).
-- Strict UTF-8 (what Python's decode accepts: no overlong forms, no surrogates): each
-- valid multi-byte sequence (the forms below, by lead byte) becomes an ASCII byte, which
-- no later form can match; a byte above 127 left over is not UTF-8.
local UTF8_FORMS = {'[\194-\223][\128-\191]', '\224[\160-\191][\128-\191]',
                    '[\225-\236\238\239][\128-\191][\128-\191]', '\237[\128-\159][\128-\191]',
                    '\240[\144-\191][\128-\191][\128-\191]',
                    '[\241-\243][\128-\191][\128-\191][\128-\191]',
                    '\244[\128-\143][\128-\191][\128-\191]'}

local function utf8_ok(s)
  for _, form in ipairs(UTF8_FORMS) do s = string.gsub(s, form, 'u') end
  return not string.find(s, '[\128-\255]')
end

local MAX_ID_BYTES = 256

-- Why `id` cannot be a job id, or nil (engine.bad_id is the same rule in Python).
local function bad_id(id)
  local n = #id
  if n == 0 then return 'empty id' end
  if n > MAX_ID_BYTES then return 'id longer than ' .. MAX_ID_BYTES .. ' bytes' end
  if not string.find(id, '[^\32-\126]') then return nil end  -- printable ASCII: the usual
  if string.find(id, '[%z\1-\31\127]') then return 'id has control characters' end
  if not utf8_ok(id) then return 'id is not UTF-8' end
  return nil
end

-- An attempts value (false = none yet) that is not a count: nil when it is fine.
local function bad_count(value)
  if not value then return nil end
  if #value > 15 or not string.find(value, '^%d+$') then
    return 'attempts value is not an integer'
  end
  return nil
end

local SHOWN_ID_BYTES = 64

-- An id for the caller's log: ASCII, at most SHOWN_ID_BYTES bytes, other bytes as \xHH.
local function shown(id)
  local cut = string.sub(id, 1, SHOWN_ID_BYTES)
  return (string.gsub(cut, '[^\32-\126]', function(ch)
    return string.format('\\x%02x', string.byte(ch))
  end))
end

--@define call_many
-- Calls a command with a long list of arguments in slices (Lua's unpack has a limit).
local function call_many(cmd, key, head, items, per)
  per = per or 1000
  for s = 1, #items, per do
    local slice = {cmd, key}
    for _, h in ipairs(head) do slice[#slice + 1] = h end
    for j = s, math.min(s + per - 1, #items) do slice[#slice + 1] = items[j] end
    redis.call(unpack(slice))
  end
end

--@define priority
-- A job's place in line: the head of pending (pending_head), the ready ZSET's scores
-- (ready_score, ready_due) and a job's priority (priority_of).

-- The earliest pending job, {id, due} ({} when none): read before the script's writes.
-- (The first entry of any ZSET: claim.lua reads ready's with it too.)
local function pending_head(pending)
  return redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
end

-- The due time of a head pending_head read: nil when pending is empty, -inf for a score
-- that is no number (none is: a ZSET's scores are doubles; kept as due long ago).
local function head_due(head)
  return head[2] and (tonumber(head[2]) or -math.huge)
end

-- Where a due job stands in the ready ZSET (lowest score claimed first): priority first,
-- then due time. score = (100 - priority) * 2^44 + due_ms, the due time kept within
-- [0, 2^44) (years 1970..2527: a job due earlier stands as due at 1970, one due later
-- as due in 2527; only due jobs are ready, so the latter needs a clock past 2527).
-- Scores stay below 201 * 2^44 < 2^53: exact in a double. Format them with '%.0f'
-- (Lua's own number printing keeps 14 digits).
local LEVEL = 17592186044416  -- 2^44

local function ready_score(priority, due)
  if due < 0 then due = 0 elseif due >= LEVEL then due = LEVEL - 1 end
  return (100 - priority) * LEVEL + due
end

-- The due time of a ready score, or nil when ready_score cannot have given it.
local function ready_due(score)
  local n = tonumber(score)
  if n == nil or n ~= n or n < 0 or n >= 201 * LEVEL then return nil end
  return n - math.floor(n / LEVEL) * LEVEL
end

-- A job's priority as the prio hash holds it (false: absent, priority 0); a value that is
-- not an integer in -100..100 (planted) reads as 0.
local function priority_of(value)
  local p = tonumber(value)
  if p == nil or p ~= math.floor(p) or p < -100 or p > 100 then return 0 end
  return p
end

--@define held
--@include now
-- Whether the queue holds jobs already, for enqueue.lua and reenqueue.lua (keys
-- ``pending``, ``ready``, ``inflight``, ``dead``, ``jobs``, ``epoch`` and ``hold``,
-- declared by the including script). Reads only: call them before the first write. Each
-- also tells whether the queue's epoch exists (for mark_epoch), whether ready exists and
-- whether cancel holds exist (for hold_back).

-- Which of the keys that can hold a job exist, in one read: EXISTS counts a key named n
-- times n times (jobs 1, epoch 2, inflight 4, ready 8, dead 16). An absent key holds no
-- job: it is not read. Whether cancel holds exist is an EXISTS of its own: named 32 more
-- times here, it cost every call 2 us; alone, about 0.4 us.
local function existing()
  local i, e, r, d = inflight, epoch, ready, dead
  return redis.call('EXISTS', jobs, e, e, i, i, i, i, r, r, r, r, r, r, r, r,
                    d, d, d, d, d, d, d, d, d, d, d, d, d, d, d, d)
end

-- The due times of ``ids`` (``dues``, changed in place) moved to the end of their cancel
-- holds (key ``hold``: a cancel whose row decided, its transaction maybe still open) when
-- ``holding`` (held's fourth answer: the key exists). A hold already ended is left to
-- cancel.lua's pruning.
local function hold_back(holding, ids, dues, now)
  if not holding then return end
  local ends = redis.call('ZMSCORE', hold, unpack(ids))
  for j = 1, #ids do
    local h = tonumber(ends[j])
    if h and h > now and h > dues[j] then dues[j] = h end
  end
end

-- Which of ``ids`` the queue holds already, one flag each: in pending, ready, in flight or
-- dead, or with an envelope, or repeated (an id met earlier in ``ids``).
local function held(ids)
  local known = existing()
  local holding = redis.call('EXISTS', hold) == 1
  local in_pending = redis.call('ZMSCORE', pending, unpack(ids))
  local in_dead = known >= 16 and redis.call('ZMSCORE', dead, unpack(ids)) or {}
  local in_ready = known % 16 >= 8 and redis.call('ZMSCORE', ready, unpack(ids)) or {}
  local in_flight = known % 8 >= 4 and redis.call('ZMSCORE', inflight, unpack(ids)) or {}
  local has_env = known % 2 == 1 and redis.call('HMGET', jobs, unpack(ids)) or {}
  local out, seen = {}, {}
  for j, job in ipairs(ids) do
    out[j] = (in_pending[j] or in_ready[j] or in_flight[j] or in_dead[j] or has_env[j]
              or seen[job]) and true or false
    seen[job] = true
  end
  return out, known % 4 >= 2, known % 16 >= 8, holding
end

-- Whether the queue holds job ``id`` in ready, in flight or dead, or with an envelope
-- (pending is not read: the caller adds the job with ZADD NX, whose reply tells whether
-- pending held it): held's reads for one job, without its tables. Every key that exists
-- is read, as by held (one of the wrong type ends the call: read_failed).
local function held_one(id)
  local known = existing()
  local in_dead = known >= 16 and redis.call('ZSCORE', dead, id)
  local in_ready = known % 16 >= 8 and redis.call('ZSCORE', ready, id)
  local in_flight = known % 8 >= 4 and redis.call('ZSCORE', inflight, id)
  local has_env = known % 2 == 1 and redis.call('HEXISTS', jobs, id) == 1
  return (in_dead or in_ready or in_flight or has_env) and true or false, known % 4 >= 2,
         known % 16 >= 8, redis.call('EXISTS', hold) == 1
end

-- Creates the queue's epoch, "<ms>:<us>:e" of the server's clock (enqueue.lua's header),
-- unless it ``exists`` (held's second answer); a caller that was given jobs calls it.
local function mark_epoch(exists)
  if exists then return end
  local t = server_time()
  redis.call('SET', epoch, string.format('%.0f', time_ms(t)) .. ':' .. t[2] .. ':e', 'NX')
end

--@define group_index
--@include call_many
-- The index of a grouped queue's due jobs (docs/groups.md; the including script declares
-- ``group``, ``group_ready`` and ``group_turns``). A queue is grouped while ``group``
-- (id -> group) exists. ``ready`` stays the truth; ``group_ready`` (all scores 0) indexes
-- its jobs by group, then ready score: member "<group>\n<score, 16 digits><id>" ("" for
-- the jobs without a group), so ZRANGEBYLEX "[<g>\n" "(<g>\11" LIMIT 0 1 is group g's
-- next job (a group id holds no control character). ``group_turns`` (group -> turn)
-- holds the groups with indexed jobs; the lowest turn is served next. An entry whose job
-- left ready (claimed, cancelled, moved) is dropped by the claim that meets it.
-- The lex range of group g's members, in group_ready and in the ZSETs of group_slots and
-- group_limits (each member starts "<group>\n").
local function group_range(g) return '[' .. g .. '\n', '(' .. g .. '\11' end

-- Group g's first `n` entries of group_ready: its next jobs.
local function group_entries(g, n)
  local lo, hi = group_range(g)
  return redis.call('ZRANGEBYLEX', group_ready, lo, hi, 'LIMIT', 0, n)
end

-- The highest turn of the rotation within +-2^53 (one beyond, +-inf included, was
-- planted: counting on from it, every turn would be the same number and the rotation
-- would become the groups' alphabetical order, the first ones served forever).
local function last_turn()
  local top = redis.call('ZREVRANGEBYSCORE', group_turns, '(9007199254740992',
                         '(-9007199254740992', 'WITHSCORES', 'LIMIT', 0, 1)
  return tonumber(top[2]) or 0
end

-- Groups `gs` join the rotation at its end; a group in it keeps its turn (NX). Given the
-- last `turn` handed out (claim.lua's rounds), they go to the end from there, those in it
-- too. Returns the last turn handed out.
local function join_turns(gs, turn)
  local args, flags = {}, turn and {} or {'NX'}
  turn = turn or last_turn()
  for _, g in ipairs(gs) do turn = turn + 1; args[#args + 1] = turn; args[#args + 1] = g end
  if #args > 0 then call_many('ZADD', group_turns, flags, args) end
  return turn
end

-- Index jobs placed in ready (`placed`: score, id, score, id, ... as ZADD takes them),
-- when the queue is grouped (``grouped``: known already, else nil and read here). Reads
-- each one's group; writes the entries (again: no-op).
local function index_ready(placed, grouped)
  if #placed == 0 then return end
  if grouped == nil then grouped = redis.call('EXISTS', group) == 1 end  -- else read already
  if not grouped then return end
  local ids = {}
  for i = 2, #placed, 2 do ids[#ids + 1] = placed[i] end
  local gs = redis.call('HMGET', group, unpack(ids))
  local members, fresh, seen = {}, {}, {}
  for j, job in ipairs(ids) do
    local g = gs[j] or ''
    members[#members + 1] = 0
    members[#members + 1] = g .. '\n' .. string.format('%016.0f', placed[2 * j - 1]) .. job
    if not seen[g] then seen[g] = true; fresh[#fresh + 1] = g end
  end
  call_many('ZADD', group_ready, {}, members)
  join_turns(fresh)
end

--@define group_slots
--@include now
--@include group_index
-- The concurrency slots of a grouped queue's jobs in flight (docs/groups.md, "Limits";
-- the including script declares ``inflight``, ``group``, ``group_ready``, ``group_turns``,
-- ``group_running`` and ``group_held``). ``group_running`` (all scores 0) holds one
-- member "<group>\n<id>" per job of a group in flight: a group's count is one ZLEXCOUNT.
-- claim.lua adds the members; every script that takes a job out of inflight frees them
-- (ack, nack, release, defer, recover). A member is an id, not a count: freeing twice, or
-- freeing a job that held none, changes nothing. ``group_held`` (group -> ms) holds the
-- groups a limit took out of the rotation; a freed slot puts its group back.

-- The held groups among `groups` leave group_held; those with due jobs join the rotation
-- at its end. True when the rotation was empty and got a group back (nothing else was
-- claimable: the caller tells the queue's workers).
local function unhold(groups)
  if #groups == 0 or redis.call('EXISTS', group_held) == 0 then return false end
  local marks = redis.call('ZMSCORE', group_held, unpack(groups))
  local off, back = {}, {}
  for j, g in ipairs(groups) do
    if marks[j] then
      off[#off + 1] = g
      if group_entries(g, 1)[1] then back[#back + 1] = g end
    end
  end
  if #off == 0 then return false end
  redis.call('ZREM', group_held, unpack(off))
  local idle = redis.call('EXISTS', group_turns) == 0
  join_turns(back)
  return idle and #back > 0
end

-- Takes `ids` out of inflight (the declared key ``inflight``) and frees their slots: their
-- groups are read first (not when ``plain``: the caller read that no group key exists;
-- nor when no job of a group is in flight), then their held groups are put back (unhold).
-- True when the workers should be told: with a `channel`, they are (now, `now`).
local function leave_flight(ids, channel, now, plain)
  if #ids == 0 then return false end
  local gs = not plain and redis.call('EXISTS', group_running) == 1 and
             redis.call('HMGET', group, unpack(ids))
  redis.call('ZREM', inflight, unpack(ids))
  if not gs then return false end
  local members, groups, seen = {}, {}, {}
  for j, job in ipairs(ids) do
    local g = gs[j]
    if g and g ~= '' then
      members[#members + 1] = g .. '\n' .. job
      if not seen[g] then seen[g] = true; groups[#groups + 1] = g end
    end
  end
  if #members == 0 then return false end
  redis.call('ZREM', group_running, unpack(members))
  local woke = unhold(groups)
  if woke and channel then tell(channel, now) end
  return woke
end

--@define group_limits
--@include group_slots
-- Per-group limits at claim time (docs/groups.md, "Limits"; claim.lua declares the keys:
-- ``limit``, ``inflight``, ``group_limits``, ``group_running``, ``group_starts``,
-- ``group_expiry``, ``group_held``). A group's limits are its override in group_limits
-- ("<rate> <per_ms> <concurrency>": -1 keeps the queue's default, 0 is none), else the
-- queue's defaults (limit's group_rate, group_per_ms, group_concurrency). The group ""
-- (jobs without a group) has none. Concurrency: the group's members of group_running,
-- plus what this claim took. Rate: the group's entries of group_starts whose claim ms
-- is less than per_ms old, plus what this claim took; an entry is also in group_expiry
-- (ms it leaves the window -> member), from where claims drop it (GROUP_TRIM a call).
local GROUP_TRIM, GROUP_REPAIR, GROUP_UNHOLD = 100, 100, 25
local glim = {of = {}, used = {}, repair = GROUP_REPAIR, refused = 0}

local function whole(v)
  local n = tonumber(v)
  if n == nil or n ~= n or n < 1 or n > 1e15 then return nil end
  return math.floor(n)
end

local function pad(ms) return string.format('%016.0f', math.max(0, ms)) end

-- The queue's defaults (limit's group_* fields, as claim.lua's limits() read them).
local function group_defaults(rate, per_ms, conc)
  glim.rate, glim.per_ms, glim.conc = whole(rate), whole(per_ms), whole(conc)
  if not (glim.rate and glim.per_ms) then glim.rate, glim.per_ms = nil, nil end
  glim.overrides = redis.call('EXISTS', group_limits) == 1
  glim.any = glim.overrides or glim.rate ~= nil or glim.conc ~= nil
end

-- The limits of the groups `gs` of a round, into glim.of: {rate, per_ms, conc} or false.
local function round_limits(gs)
  if not glim.any then return end
  local o = {}
  if glim.overrides then o = redis.call('HMGET', group_limits, unpack(gs)) end
  for j = 1, #gs do
    local g, rate, per_ms, conc = gs[j], glim.rate, glim.per_ms, glim.conc
    if o[j] then
      local r, p, c = string.match(o[j], '^(-?%d+) (-?%d+) (-?%d+)$')
      if r and tonumber(r) >= 0 then rate, per_ms = whole(r), whole(p) end
      if c and tonumber(c) >= 0 then conc = whole(c) end
    end
    if not (rate and per_ms) then rate, per_ms = nil, nil end
    glim.of[g] = g ~= '' and (rate or conc) and {rate, per_ms, conc} or false
  end
end

-- Drops g's members of group_running whose job is not in flight (one no script could
-- free: its group entry removed by hand), at most GROUP_REPAIR a claim; how many.
local function repair(g, running, lo, hi)
  local k = math.min(running, glim.repair)
  if k <= 0 then return 0 end
  glim.repair = glim.repair - k
  local ms = redis.call('ZRANGEBYLEX', group_running, lo, hi, 'LIMIT', 0, k)
  local ids, off = {}, {}
  for j, m in ipairs(ms) do ids[j] = string.sub(m, #g + 2) end
  local live = redis.call('ZMSCORE', inflight, unpack(ids))
  for j, m in ipairs(ms) do if not live[j] then off[#off + 1] = m end end
  if #off > 0 then redis.call('ZREM', group_running, unpack(off)) end
  return #off
end

-- How many more jobs group g may take in this claim (nil: no limit) and, when none,
-- until when it is held: concurrency, now + lease_ms (a settle of one of its jobs puts
-- it back sooner), or now when the repair dropped a whole budget of stale slots (more
-- may be stale: the next claim goes on); rate, when the window lets one more claim in
-- (the entry whose leaving lets a claim in is looked up among the first GROUP_TRIM past
-- the rate, a claim adds at most 25; further, a rate lowered at run time or entries
-- written by hand, the group is held for a window: never a walk through the window).
local function group_room(g, now, lease_ms)
  local lim = glim.of[g]
  if not lim then return nil, nil end
  local used, lo, hi = glim.used[g] or 0, group_range(g)
  local room, until_ms = nil, nil
  if lim[3] then
    local running = redis.call('ZLEXCOUNT', group_running, lo, hi)
    if running > 0 and running + used >= lim[3] then
      local budget = glim.repair
      local dropped = repair(g, running, lo, hi)
      running = running - dropped
      if dropped > 0 and dropped == budget and lim[3] <= running + used then return 0, now end
    end
    room = math.max(0, lim[3] - running - used)
    if room == 0 then return 0, now + lease_ms end
  end
  if lim[1] then
    local from = lo .. pad(now - lim[2] + 1)
    local n = redis.call('ZLEXCOUNT', group_starts, from, hi)
    local free = math.max(0, lim[1] - n - used)
    if room == nil or free < room then room = free end
    if free == 0 then
      local at = n + used - lim[1]
      until_ms = now + lim[2]
      local s = at < math.min(n, GROUP_TRIM) and
                redis.call('ZRANGEBYLEX', group_starts, from, hi, 'LIMIT', at, 1)[1]
      if s then until_ms = (tonumber(string.sub(s, #g + 2, #g + 17)) or now) + lim[2] end
    end
  end
  return room, until_ms
end

-- The slots and window entries of the leased jobs (`taken`: {group, id, token} each),
-- and the window entries that expired dropped.
local function log_starts(taken, now)
  local running, starts, expiry = {}, {}, {}
  for _, t in ipairs(taken) do
    local g = t[1]
    if g ~= '' then
      running[#running + 1] = 0; running[#running + 1] = g .. '\n' .. t[2]
      local lim = glim.of[g]
      if lim and lim[1] then
        local m = g .. '\n' .. pad(now) .. t[2] .. ':' .. t[3]
        starts[#starts + 1] = 0; starts[#starts + 1] = m
        expiry[#expiry + 1] = string.format('%.0f', now + lim[2]); expiry[#expiry + 1] = m
      end
    end
  end
  call_many('ZADD', group_running, {}, running)  -- (no call for an empty list)
  call_many('ZADD', group_starts, {}, starts)
  call_many('ZADD', group_expiry, {}, expiry)
  local old = redis.call('ZRANGEBYSCORE', group_expiry, '-inf', now, 'LIMIT', 0, GROUP_TRIM)
  if #old > 0 then
    redis.call('ZREM', group_starts, unpack(old))
    redis.call('ZREM', group_expiry, unpack(old))
  end
end

--@define idle
-- Whether no claim would take a job now (in a grouped queue: no group in the rotation):
-- an idle worker then sleeps until the head of pending (the keys ``ready``, ``group`` and
-- ``group_turns``, declared by the including script). ``ready_exists`` (optional): read
-- already.
local function queue_idle(ready_exists)
  if ready_exists == nil then ready_exists = redis.call('EXISTS', ready) == 1 end
  return not ready_exists or
         (redis.call('EXISTS', group) == 1 and redis.call('EXISTS', group_turns) == 0)
end

--@define line
--@include now
--@include priority
--@include group_index
--@include idle
-- Puts jobs back in line. A job due by `now` goes straight to ready when no job of
-- pending is due before it; any other job goes to pending, from where claim.lua promotes
-- due jobs in due order. So every job of ready is due no later than every job of pending,
-- and a job never overtakes one of the same priority that was due before it.
-- new_line reads (call it before the script's writes; with `no_urgent`, line_reads after
-- the enters too), enter only collects,
-- line_write writes and tells the queue's wake channel `channel` the earliest due time
-- placed when it moves the queue's next claim earlier: nothing was ready (an idle worker
-- sleeps until the head of pending) and it is before that head, or `moved` was the head.
-- A job placed in ready is also indexed by group when the queue is grouped (lib.lua
-- group_index). A job of priority above 0 placed in pending is also indexed in urgent (the
-- including script declares it), so claim.lua promotes it when due
-- ahead of the jobs of pending due before it; when it comes before the index's first
-- entry the channel is told too (a busy worker's urgent timer claims it at that time), and
-- so it is when one goes straight to ready ahead of a ready backlog (claimed first by
-- the next claim, which the timer makes at once).
-- `no_urgent`: the caller enters no job of priority above 0: urgent is not read, and
-- whether the queue is idle is read only if a wake-up depends on it (line_reads, which
-- the caller then calls after its enters, before its first write).

local function new_line(pending, ready, no_urgent)
  local head = pending_head(pending)
  local line = {head = head[1], first = head_due(head), to_pending = {}, to_ready = {},
                to_urgent = {}}
  if not no_urgent then
    line.urgent_first = tonumber(pending_head(urgent)[2])
    line.idle = queue_idle()
  end
  return line
end

-- The rest of a `no_urgent` line's reads: whether the queue is idle, when the earliest
-- job entered comes before the head of pending (or none is there); else line_write tells
-- nobody whatever the answer. ``ready_exists``: as queue_idle's.
local function line_reads(line, ready_exists)
  local due = line.earliest
  if due ~= nil and (line.first == nil or due < line.first) then
    line.idle = queue_idle(ready_exists)
  end
end

local function enter(line, id, due, priority, now)
  if due <= now and (line.first == nil or due <= line.first) then
    local r = line.to_ready
    r[#r + 1] = string.format('%.0f', ready_score(priority, due)); r[#r + 1] = id
    if priority > 0 and not line.idle then  -- ahead of a ready backlog: tell the timers
      line.urgent_ready = due
    end
  else
    local p = line.to_pending
    p[#p + 1] = due; p[#p + 1] = id
    if priority > 0 then
      local u = line.to_urgent
      u[#u + 1] = due; u[#u + 1] = id
      line.urgent_earliest = math.min(due, line.urgent_earliest or due)
    end
  end
  if line.earliest == nil or due < line.earliest then line.earliest = due end
end

local function line_write(line, pending, ready, channel, moved)
  if #line.to_pending > 0 then call_many('ZADD', pending, {}, line.to_pending) end
  if #line.to_ready > 0 then call_many('ZADD', ready, {}, line.to_ready) end
  index_ready(line.to_ready, line.grouped)
  if #line.to_urgent > 0 then call_many('ZADD', urgent, {}, line.to_urgent) end
  local due = line.earliest
  if due ~= nil and line.idle and (line.first == nil or due < line.first
                                   or line.head == moved) then
    tell(channel, due)
  elseif line.urgent_earliest ~= nil and (line.urgent_first == nil
                                          or line.urgent_earliest < line.urgent_first) then
    tell(channel, line.urgent_earliest)
  elseif line.urgent_ready ~= nil then
    tell(channel, line.urgent_ready)
  end
end

--@define offset
-- A job's runs entry (runs: "<token> <offset> <streak>", or nil): the delivery whose
-- run started last; how far its lease tokens run ahead of its attempts (deliveries that
-- never started, numbers a re-enqueue skipped): the attempt of delivery `token` is
-- token - offset; the deliveries in a row that never started. ``token``: the delivery's
-- token; the offset is kept below it (an entry written by hand never makes an attempt
-- number below 1).
local function offset_of(entry, token)
  if not entry then return 0, 0 end
  local _, offset, streak = string.match(entry, '^(%d+) (%d+) ?(%d*)$')
  offset = math.max(0, math.min(tonumber(offset) or 0, (tonumber(token) or 0) - 1))
  return offset, tonumber(streak) or 0
end

--@define forget
-- Forgets jobs that are final (done, cancelled, purged, trimmed from dead, set aside as
-- poison): their envelope, attempts count (lease token), cancel mark, priority, start
-- marks and group (the keys ``jobs``, ``attempts``, ``cancel``, ``prio``, ``runs`` and
-- ``group`` the including script declares). Where they were listed (pending, ready,
-- inflight, dead) is the caller's to clear, except the index of urgent pending jobs
-- (``urgent``, declared too). At most a
-- few hundred ids a call. ``plain`` (optional): the caller read that ``cancel``, ``prio``,
-- ``urgent`` and ``group`` are absent (a queue without cancels, priorities or groups):
-- nothing to remove there; ``plain.jobs`` false: ``jobs`` is absent too; ``plain.runs``
-- (when given): the only ids of ``ids`` with a runs entry (the caller read them).
local function forget(ids, plain)
  if #ids == 0 then return end
  if plain then
    redis.call('HDEL', attempts, unpack(ids))
    if plain.jobs then redis.call('HDEL', jobs, unpack(ids)) end
    local marked = plain.runs or ids
    if #marked > 0 then redis.call('HDEL', runs, unpack(marked)) end
    return
  end
  redis.call('HDEL', runs, unpack(ids))
  redis.call('HDEL', jobs, unpack(ids))
  redis.call('HDEL', attempts, unpack(ids))
  redis.call('ZREM', urgent, unpack(ids))
  redis.call('SREM', cancel, unpack(ids))
  redis.call('HDEL', prio, unpack(ids))
  redis.call('HDEL', group, unpack(ids))
end

--@define record_settled
-- Records how jobs ended (the declared keys settled: id -> ms, settled_by: id ->
-- "<code> <attempt> <holder> <token>", the token of the lease settled: a failover to a
-- lagging replica hands it out again, a requeue never does) for the worker ``holder``
-- until its audit row lands (forget_settled.lua); ``entries`` holds id, "<code>
-- <attempt>", token triples (at most 250: one ZADD and one HSET, their arguments built
-- once). No record when ``holder`` is "" (the bare engine, jobs set aside). ``at``: the
-- script's now (integer ms), read before its first write, formatted once.
local function record_settled(holder, at, entries)
  if holder == '' or #entries == 0 then return end
  local stamp = string.format('%d', at)
  local scored, described = {'ZADD', settled}, {'HSET', settled_by}
  for i = 1, #entries, 3 do
    local id = entries[i]
    scored[#scored + 1] = stamp
    scored[#scored + 1] = id
    described[#described + 1] = id
    described[#described + 1] = entries[i + 1] .. ' ' .. holder .. ' ' .. entries[i + 2]
  end
  redis.call(unpack(scored))
  redis.call(unpack(described))
end

--@define trim_log
-- Window logs (ZSETs of starts or grants by ms: claim.lua's rate limit, acquire.lua's):
-- what left the window dropped (trim_log), when a full window lets one more in
-- (window_opens).

-- Drops up to `most` entries scored at or before `cutoff` from the ZSET `log` (a window
-- log of starts or grants: what left the window), oldest first.
local function trim_log(log, cutoff, most)
  local old = redis.call('ZCOUNT', log, '-inf', string.format('%.0f', cutoff))
  if old > 0 then redis.call('ZREMRANGEBYRANK', log, 0, math.min(old, most) - 1) end
end

-- When a full window lets one more in: its entry `at` (0: the oldest) of those scored after
-- `cutoff` leaves the window `width` ms after its score (now + width when there is none).
local function window_opens(log, cutoff, at, width, now)
  local s = redis.call('ZRANGEBYSCORE', log, '(' .. string.format('%.0f', cutoff), '+inf',
                       'WITHSCORES', 'LIMIT', at, 1)
  return s[2] and tonumber(s[2]) + width or now + width
end
