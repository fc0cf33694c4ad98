-- claim.lua : take up to `limit` due jobs, highest priority first, and lease them.
--
-- KEYS: pending inflight jobs attempts cancel dead ready prio paused limit starts urgent runs group_ready group_turns group group_paused group_limits group_running group_starts group_expiry group_held record?
-- record (optional: keys.QueueKeys.claim_record) is written with a nonce, kept lease_ms.
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  limit     most jobs to claim (1..50; more is capped)
-- ARGV[3]  lease_ms  lease length; the job is redelivered if not settled or extended by then
-- ARGV[4]  nonce     "" or the claim's nonce (with record). A claim whose nonce is the
--          record's is one asked again after its reply was lost: it claims nothing and
--          answers the jobs of the record still leased under their token (next_due_ms =
--          now: claim again), so a lost reply never strands jobs until their lease ends.
--
-- Order. Jobs wait in pending (due_ms) until due; ready holds due jobs by priority, then
-- due time. Each call first promotes up to 50 due jobs of pending (in due order) and up
-- to 50 due jobs of the urgent index (priority above 0, in due order, wherever they stand
-- in pending), then leases the lowest ready scores (the promoted ones included). Jobs
-- enqueued, retried or released already due go straight to ready when pending holds
-- nothing due before them (lib.lua line), so among jobs of one priority the earlier due
-- is always claimed first (jobs of priority above 0 leave pending in due order through
-- either door). A due job of priority above 0 is promoted by the first claim after it is
-- due when at most 50 such jobs are due before it, however long the backlog of pending
-- due before it (a job of priority 0 or below waits for that backlog's promotion, at most
-- ceil(n / 50) claims with n jobs due before it). An index entry whose job left pending
-- (claimed, cancelled, moved) is dropped when read or forgotten with its job.
-- Groups. While the queue is grouped (`group` exists: a job of it has a group; once the
-- last is gone the index, the rotation and the held groups are dropped, left over they
-- would hide the jobs without a group from this step), a claim first
-- promotes as above, leasing nothing, and indexes the promoted jobs and the first 10 of
-- ready by group (2g); it then leases at most 25 jobs (TURNS) in turns among the groups
-- with due jobs, lowest turn first: each group of a round an equal share (at least one)
-- of what is still wanted, in the queue's order inside the group; a group served goes to
-- the end of the rotation, one with nothing left leaves it (3g). Jobs without a group are
-- the group "". Index entries whose job left ready are dropped when met (at most 100).
-- A grouped claim promotes at most 25 due jobs of pending and 25 of the urgent index
-- (GROUP_PROMOTE: read 25 for the 50s above).
-- Group limits (3g): a group takes at most what its concurrency and rate leave room for;
-- a group with no room leaves the rotation for group_held (counted among the 100 skips),
-- so the other groups are served; it comes back when one of its jobs leaves inflight
-- (lib.lua group_slots), or at its time (rate: when its window lets a claim in;
-- concurrency: a lease later), 25 a claim. Each leased job of a group gets a slot
-- (group_running) and, when its group has a rate, a window entry.
-- Queue limits: at most `rate` claims in any `per_ms` window (the starts log, Redis clock)
-- and at most `concurrency` jobs in flight (the size of inflight: a dead worker's leases
-- leave it when recover.lua takes them back). A paused queue claims and promotes nothing.
--
-- Each claimed job gets attempts + 1; that number is its lease token for ack/nack/extend;
-- its attempt number is the token minus the runs entry's offset.
-- Everything is read and checked before the first write. A poison entry is set aside
-- alone, without being charged an attempt, and the rest of the batch is claimed: an id
-- that cannot be a job id (empty, over 256 bytes, control characters, not UTF-8) is
-- removed; a job whose score is not a time (-inf, +inf, outside years 1..9999; in ready:
-- not a ready score), whose attempts value is not an integer or whose envelope is not
-- UTF-8 goes to dead (a bad attempts value dropped). Entries of pending scored past year
-- 9999 never come due: up to 10 of them are set aside per call too.
-- Returns: {now_ms, next_due_ms, paused (1/0), blocked_until_ms, limited (1/0),
--           next_urgent_ms, n_aside,
--           n_aside triples: id, reason, removed (1 removed, 0 moved to dead),
--           then per claimed job: id, due_ms, token, attempt, envelope}
--          next_due_ms: when a claim is next worth making: -1 none known (empty, paused,
--          or the concurrency limit is full: after a job settles), the rate limit's
--          blocked_until_ms, a due time <= now while ready holds jobs, else the earliest
--          job of pending. blocked_until_ms: -1, or when the rate limit lets a claim in
--          again (it stopped this one). limited: a limit held back jobs that were ready.
--          next_urgent_ms: -1, or the due time of the first entry of the urgent index
--          (after this call: a job of priority above 0 still in pending).
--          A grouped queue: limited is 1 also when a group limit held a group back, and
--          with no group left in the rotation next_due_ms is the first held group's time.
--          envelope "" = not in Redis: the caller loads the payload (the audit row);
--          a removed id is shown ASCII-escaped and cut to 64 bytes (it is for the log)
-- Cost: at most 50 jobs leased (scripts.MAX_CLAIM; a grouped queue 25, scripts.MAX_TURNS
--       over at most 20 rounds, one index read per group a round, 100 stale entries
--       dropped, 10 of ready indexed), 50 promoted (scripts.MAX_PROMOTE) and
--       50 urgent ones (scripts.MAX_URGENT, one ZSCORE each; a grouped queue 25 and 25,
--       scripts.MAX_GROUP_PROMOTE), 10 set aside and 1,000 old window entries dropped
--       per call;
--       group limits: two ZLEXCOUNT per limited group met (within the 100 skips), 100
--       slots checked against inflight, 25 held groups looked at again and 100 expired
--       window entries dropped per call:
--       O((limit + 100) log N), never a scan of the backlog or of the groups. A repeated
--       nonce: one GET, and per recorded job (at most 50) one ZSCORE and three HGET.
--@include ms_range
--@include poison
--@include priority
--@include forget
--@include offset
--@include trim_log
--@include group_limits
-- (group_limits brings now, call_many, group_index and group_slots)
local PROMOTE, TRIM = 50, 1000
local MAX_CLAIM = 50  -- most jobs leased a call (scripts.MAX_CLAIM)
local URGENT = 50
local TURNS, SKIPS, ROUNDS, HEAD = 25, 100, 20, 10  -- a grouped queue: 2g, 3g
local GROUP_PROMOTE = 25  -- a grouped queue: PROMOTE and URGENT (each one is indexed too)
local now = now_ms(ARGV[1])
local nonce = ARGV[4] or ''
local want = math.max(1, math.min(tonumber(ARGV[2]) or 1, MAX_CLAIM))
local out = {now, -1, 0, -1, 0, -1, 0}
-- What the steps below share: the queue's limits (1), what was read (2), chosen (3) and
-- leased (4); everything before step 6 only reads.
local grant, rate, per_ms, in_window, cutoff = want, nil, nil, 0, 0
local cand, by_id, lead, from_ready, unindex = {}, {}, {}, {}, {}
local gone, died, entries = {}, {}, {}  -- entries: {score, id, promoted, due}
local take, promoted, seen, left = {}, {}, {}, 0
local leased, tokens, reset, claimed, n = {}, {}, {}, {}, 0
local slots = {}  -- a grouped queue: {group, id, token} of each job leased
local rec_parts = {nonce, '|'}  -- the claim record (with a record key): lease() adds a line a job
local grouped = false  -- the queue has groups: steps 2g and 3g

local function aside(id, why, removed)
  if removed then gone[#gone + 1] = id; id = shown(id)
  else died[#died + 1] = now; died[#died + 1] = id end
  out[#out + 1] = id; out[#out + 1] = why; out[#out + 1] = removed and 1 or 0
end

-- The due time of ready's entry (id, score), or nil when it is poison: set aside.
local function ready_ok(id, score)
  local why, due = bad_id(id), ready_due(score)
  if why then aside(id, why, true)
  elseif due == nil then aside(id, 'ready score ' .. score .. ' is not one', false)
  else return due end
  return nil
end

-- 0. a claim asked again under its nonce: the jobs of its record still leased, else nil
local function replayed()
  if not (record and nonce ~= '') then return nil end
  local prev = redis.call('GET', record)
  if not (prev and string.sub(prev, 1, #nonce + 1) == nonce .. '|') then return nil end
  local again = {now, now, 0, -1, 0, -1, 0}
  local read = 0
  for id, due, token in string.gmatch(string.sub(prev, #nonce + 2), '([^\t\n]+)\t(-?%d+)\t(%d+)\n') do
    read = read + 1
    if read > MAX_CLAIM then break end  -- a longer record is not a claim's
    if redis.call('ZSCORE', inflight, id) and redis.call('HGET', attempts, id) == token then
      again[#again + 1] = id; again[#again + 1] = tonumber(due)
      again[#again + 1] = tonumber(token)
      again[#again + 1] = tonumber(token) - offset_of(redis.call('HGET', runs, id), token)
      again[#again + 1] = redis.call('HGET', jobs, id) or ''
    end
  end
  return again
end

-- 1. the queue's limits: how many may be claimed (grant); a grouped queue's group defaults
local function limits()
  local conf = redis.call('HMGET', limit, 'rate', 'per_ms', 'concurrency', 'group_rate',
                          'group_per_ms', 'group_concurrency')
  if grouped then group_defaults(conf[4], conf[5], conf[6]) end
  -- whole numbers only (a planted 1.5 would make the ZRANGE bounds below invalid)
  local function floor(v) return tonumber(v) and math.floor(tonumber(v)) end
  local conc
  rate, per_ms, conc = floor(conf[1]), floor(conf[2]), floor(conf[3])
  if rate and per_ms and rate >= 1 and per_ms >= 1 then
    cutoff = now - per_ms
    in_window = redis.call('ZCOUNT', starts, '(' .. string.format('%.0f', cutoff), '+inf')
    grant = math.min(grant, math.max(0, rate - in_window))
  else
    rate = nil
  end
  if conc and conc >= 0 then
    grant = math.min(grant, math.max(0, conc - redis.call('ZCARD', inflight)))
  end
end

-- entries in their order: score, then id. The scores are sorted as plain numbers (a Lua
-- comparator called some 3,000 times cost more than the rest of a promotion); only the
-- entries sharing a score are sorted by id.
local function sort_entries()
  local first, ties, scores = {}, {}, {}
  for _, e in ipairs(entries) do
    local s, e1 = e[1], first[e[1]]
    if e1 == nil then first[s] = e; scores[#scores + 1] = s
    elseif ties[s] then ties[s][#ties[s] + 1] = e
    else ties[s] = {e1, e} end
  end
  table.sort(scores)
  local k = 0
  for _, s in ipairs(scores) do
    local same = ties[s]
    if same then
      table.sort(same, function(a, b) return a[2] < b[2] end)
      for _, e in ipairs(same) do k = k + 1; entries[k] = e end
    else
      k = k + 1; entries[k] = first[s]
    end
  end
end

-- 2. read: due jobs of pending to promote (with the urgent ones out of their due order),
-- the head of ready; entries are the candidates, by ready score
local function read_candidates()
  cand = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'WITHSCORES', 'LIMIT', 0, PROMOTE)
  -- leaving pending by id (cand leaves by rank): up to 10 entries past year 9999 (set
  -- aside), and the due jobs of priority above 0 not among cand (out of its due order)
  if now <= MAX_MS then
    by_id = redis.call('ZRANGEBYSCORE', pending, '(' .. MAX_MS_ARG, '+inf', 'WITHSCORES',
                       'LIMIT', 0, 10)
  end
  lead = redis.call('ZRANGEBYSCORE', urgent, '-inf', now, 'LIMIT', 0, URGENT)
  local in_cand = {}
  for i = 1, #cand, 2 do in_cand[cand[i]] = true end
  for _, id in ipairs(lead) do
    if not in_cand[id] then
      local s = tonumber(redis.call('ZSCORE', pending, id))
      if s and s <= now then by_id[#by_id + 1] = id; by_id[#by_id + 1] = s end
    end
  end
  local head = redis.call('ZRANGE', ready, 0, grant, 'WITHSCORES')  -- one more: held back?
  for i = 1, #head, 2 do
    local id, due = head[i], ready_ok(head[i], head[i + 1])
    from_ready[#from_ready + 1] = id
    if due then entries[#entries + 1] = {tonumber(head[i + 1]), id, false, due} end
  end
  local ids, scores = {}, {}
  for _, found in ipairs({cand, by_id}) do
    for i = 1, #found, 2 do ids[#ids + 1] = found[i]; scores[#scores + 1] = found[i + 1] end
  end
  local prios = {}
  if #ids > 0 and redis.call('EXISTS', prio) == 1 then
    prios = redis.call('HMGET', prio, unpack(ids))
  end
  unindex = lead  -- the urgent entries read, and those of the jobs leaving pending
  for j = 1, #ids do
    local id, due, p = ids[j], as_ms(scores[j]), prios[j] and priority_of(prios[j]) or 0
    local why = bad_id(id)
    if p > 0 then unindex[#unindex + 1] = id end
    if why then aside(id, why, true)
    elseif due == nil then aside(id, 'due score ' .. scores[j] .. ' is not a time', false)
    else entries[#entries + 1] = {ready_score(p, due), id, true, due} end
  end
  if #ids > 0 then sort_entries() end  -- else the head of ready only: in order already
end

-- 3. choose: the `grant` lowest scores are leased, the other promoted ones become ready
local function choose()
  for _, e in ipairs(entries) do
    if not seen[e[2]] then
      seen[e[2]] = true
      if #take < grant then take[#take + 1] = e
      elseif e[3] then
        -- the score as a number: redis.call passes it as '%.17g', exact below 2^53 (and
        -- no string.format a job, a third of choose's time)
        promoted[#promoted + 1] = e[1]; promoted[#promoted + 1] = e[2]
      end
    end
  end
  left = #entries - #take  -- ready jobs a limit held back (at least)
end

-- 4. lease: each chosen job's token and attempt (a poison one is set aside instead)
local function lease()
  if #take == 0 then return end
  local lease_at = string.format('%.0f', now + tonumber(ARGV[3]))
  local take_ids = {}
  for j, e in ipairs(take) do take_ids[j] = e[2] end
  local envs = {}
  if redis.call('EXISTS', jobs) == 1 then envs = redis.call('HMGET', jobs, unpack(take_ids)) end
  local counts = redis.call('HMGET', attempts, unpack(take_ids))
  local marked = redis.call('HMGET', runs, unpack(take_ids))
  for j, e in ipairs(take) do
    local id = e[2]
    local why = bad_count(counts[j])
    if why then reset[#reset + 1] = id end
    local env = envs[j]
    if env and string.find(env, '[\128-\255]') and not utf8_ok(env) then
      why = 'envelope is not UTF-8'
    end
    if why then
      aside(id, why, false)
    else
      local token = (tonumber(counts[j]) or 0) + 1
      leased[#leased + 1] = lease_at; leased[#leased + 1] = id
      local tok = string.format('%d', token)
      tokens[#tokens + 1] = id; tokens[#tokens + 1] = tok
      claimed[#claimed + 1] = id; claimed[#claimed + 1] = e[4]; claimed[#claimed + 1] = token
      claimed[#claimed + 1] = token - offset_of(marked[j], token); claimed[#claimed + 1] = envs[j] or ''
      if e[5] then slots[#slots + 1] = {e[5], id, token} end
      if record and nonce ~= '' then  -- the claim record's line (one table.concat at the end)
        rec_parts[#rec_parts + 1] = id .. '\t' .. string.format('%d', e[4]) .. '\t' .. tok .. '\n'
      end
    end
  end
  n = #tokens / 2
end

-- 5. held back by a limit: say so, and when a full rate window lets a claim in again
local function held_back()
  if not (left > 0 and grant < want) then return end
  out[5] = 1
  if rate and in_window + n >= rate then  -- the window is full: when its oldest leaves
    local at = in_window + n - rate
    out[4] = at < in_window and window_opens(starts, cutoff, at, per_ms, now) or now + per_ms
  end
end

-- 6. write: everything above was only read (a grouped queue's 3g wrote already)
local function write_moves()
  if #cand > 0 then redis.call('ZREMRANGEBYRANK', pending, 0, #cand / 2 - 1) end
  local off = {}
  for i = 1, #by_id, 2 do off[#off + 1] = by_id[i] end
  if #off > 0 then redis.call('ZREM', pending, unpack(off)) end
  if #unindex > 0 then redis.call('ZREM', urgent, unpack(unindex)) end
  if #from_ready > 0 then  -- the leased (whatever copy was taken) and the set aside
    local off = {}
    for _, id in ipairs(from_ready) do if not seen[id] then off[#off + 1] = id end end
    for _, e in ipairs(take) do off[#off + 1] = e[2] end
    if #off > 0 then redis.call('ZREM', ready, unpack(off)) end
  end
  if #promoted > 0 then call_many('ZADD', ready, {}, promoted) end
end

local function write_leases()
  if grouped then log_starts(slots, now) end
  if n > 0 then  -- at most MAX_CLAIM leases: 100 arguments, within unpack's reach
    redis.call('HSET', attempts, unpack(tokens))
    redis.call('ZADD', inflight, unpack(leased))
  end
  if rate then
    local logged, stamp = {}, string.format('%.0f', now)
    for j = 1, #tokens, 2 do
      logged[#logged + 1] = stamp
      logged[#logged + 1] = tokens[j] .. ':' .. tokens[j + 1] .. ':' .. stamp
    end
    call_many('ZADD', starts, {}, logged)
    trim_log(starts, cutoff, TRIM)
  end
  if record and nonce ~= '' and n > 0 then  -- rec_parts: "<nonce>|" then lease()'s lines
    redis.call('SET', record, table.concat(rec_parts), 'PX', math.max(1, tonumber(ARGV[3]) or 1))
  end
  if #died > 0 then call_many('ZADD', dead, {}, died) end
  if #reset > 0 then
    redis.call('HDEL', attempts, unpack(reset))
    redis.call('HDEL', runs, unpack(reset))
  end
  forget(gone)
end

-- 7. when to claim next; when the urgent index's first job is due (a worker's timer)
local function next_claim()
  local next_urgent = pending_head(urgent)  -- its first entry
  if next_urgent[2] then out[6] = tonumber(next_urgent[2]) end
  if out[5] == 1 then
    out[2] = out[4]
    return
  end
  local first = pending_head(ready)  -- the same read (first entry), of ready
  if grouped and left == 0 then first = {} end  -- what ready holds is paused or held groups'
  if first[2] then
    out[2] = math.min(now, ready_due(first[2]) or now)
  else
    local h = pending_head(pending)
    if h[2] then
      local due = as_ms(h[2])
      if due ~= nil then out[2] = due
      elseif tonumber(h[2]) < 0 then out[2] = now end  -- -inf left over: claim again now
    end
  end
  if grouped and left == 0 then  -- held groups only: when the first is looked at again
    local h = pending_head(group_held)  -- its first entry
    if h[2] then
      out[5] = 1
      if out[2] == -1 or tonumber(h[2]) < out[2] then out[2] = tonumber(h[2]) end
    end
  end
end

-- 2g. a grouped queue: the promoted jobs and the first HEAD of ready (jobs placed before
-- the queue was grouped reach the index so) are indexed by group; a poison entry of that
-- head is set aside (it could not be indexed)
local function index_promoted()
  index_ready(promoted)
  local head = redis.call('ZRANGE', ready, 0, HEAD - 1, 'WITHSCORES')
  local placed, off = {}, {}
  for i = 1, #head, 2 do
    local id, score = head[i], head[i + 1]
    if not ready_ok(id, score) then off[#off + 1] = id
    else placed[#placed + 1] = score; placed[#placed + 1] = id end
  end
  if #off > 0 then redis.call('ZREM', ready, unpack(off)) end
  index_ready(placed)
end

-- 3g. a grouped queue: round-robin among the groups of group_turns, lowest turn first. A
-- round reads the next groups (at most as many as jobs still wanted) and takes from each
-- an equal share of what is wanted (at least one), its next jobs by its index (priority,
-- then due time); a group goes to the end of the rotation, or leaves it when it has no
-- job left. An entry whose job left ready (or is there under another score), or a group
-- without entries, is dropped: at most SKIPS per call, and at most ROUNDS rounds.
local function keep_valid(picked)
  local ids, members, off = {}, {}, {}
  for j, m in ipairs(picked) do ids[j] = string.sub(m[1], m[2] + 18); members[j] = m[1] end
  local scores = redis.call('ZMSCORE', ready, unpack(ids))
  redis.call('ZREM', group_ready, unpack(members))
  for j, id in ipairs(ids) do
    local m, s = picked[j], scores[j]
    if s and tonumber(s) == tonumber(string.sub(m[1], m[2] + 2, m[2] + 17)) then
      off[#off + 1] = id
      local due = ready_ok(id, s)
      if due then take[#take + 1] = {tonumber(s), id, false, due, string.sub(m[1], 1, m[2])} end
    end
  end
  if #off > 0 then redis.call('ZREM', ready, unpack(off)) end
  return #ids - #off  -- the stale entries
end

-- The groups of `gs` not paused (a paused one leaves the rotation); nil when `gs` is empty.
local function unpaused(gs)
  if #gs == 0 then return nil end
  if redis.call('EXISTS', group_paused) == 0 then return gs end
  local marks, out, off = redis.call('SMISMEMBER', group_paused, unpack(gs)), {}, {}
  for j, g in ipairs(gs) do
    if marks[j] == 1 then off[#off + 1] = g else out[#out + 1] = g end
  end
  if #off > 0 then redis.call('ZREM', group_turns, unpack(off)) end
  return out
end

-- A group of a round whose limit leaves it no room goes to group_held (out of the
-- rotation: `off`); else its share, at most its room, is picked (`picked`: {member, #g})
-- and it goes to the end of the rotation (`turns`), or leaves it with no job left (`done`).
local function serve(g, per, quota, picked, turns, done, off, holds)
  local e = group_entries(g, per + 1)
  if #e == 0 then done[#done + 1] = g; return 0, 1 end  -- a group left without entries
  local room, until_ms = group_room(g, now, tonumber(ARGV[3]))
  if room == 0 then
    off[#off + 1] = g; holds[#holds + 1] = until_ms; holds[#holds + 1] = g
    glim.refused = glim.refused + 1
    return 0, 1
  end
  local k = math.min(per, quota, room or quota, #e)
  for i = 1, k do picked[#picked + 1] = {e[i], #g} end
  if #e > k then turns[#turns + 1] = g else done[#done + 1] = g end
  glim.used[g] = (glim.used[g] or 0) + k
  return k, 0
end

local function take_turns()
  -- the held groups whose time came are looked at again (GROUP_UNHOLD a claim)
  unhold(redis.call('ZRANGEBYSCORE', group_held, '-inf', now, 'LIMIT', 0, GROUP_UNHOLD))
  local turn, skips, rounds = last_turn(), 0, 0
  while #take < grant and skips < SKIPS and rounds < ROUNDS do
    rounds = rounds + 1
    local quota = grant - #take
    local gs = unpaused(redis.call('ZRANGE', group_turns, 0, quota - 1))
    if gs == nil then break end
    local per = math.max(1, math.floor(quota / math.max(1, #gs)))  -- gs {}: all paused
    local picked, turns, done, off, holds = {}, {}, {}, {}, {}
    if #gs > 0 then round_limits(gs) end
    for _, g in ipairs(gs) do
      if quota == 0 then break end
      local k, skipped = serve(g, per, quota, picked, turns, done, off, holds)
      quota, skips = quota - k, skips + skipped
    end
    if #picked > 0 then skips = skips + keep_valid(picked) end
    turn = join_turns(turns, turn)
    if #done > 0 then redis.call('ZREM', group_turns, unpack(done)) end
    if #off > 0 then
      redis.call('ZREM', group_turns, unpack(off))
      redis.call('ZADD', group_held, unpack(holds))
    end
  end
  left = redis.call('EXISTS', group_turns)
end

-- 0. a paused queue claims and promotes nothing: its reply, else nil
local function paused_reply()
  if redis.call('EXISTS', paused) == 0 then return nil end
  out[3] = 1
  return out
end

-- Whether the queue is grouped (`group` exists); the index, rotation and held groups a
-- queue no longer grouped left over are dropped (they would hide its jobs from 2 and 3).
local function grouped_queue()
  local has = redis.call('EXISTS', group, group_ready, group_turns, group_held)  -- one read
  if has == 0 then return false end  -- without groups: nothing more
  if redis.call('EXISTS', group) == 1 then return true end
  redis.call('UNLINK', group_ready, group_turns, group_held)  -- O(1) here: freed apart
  return false
end

-- A plain queue: read, choose, lease, held back?, then the moves written.
local function claim_plain()
  read_candidates()
  choose()
  lease()
  held_back()
  write_moves()
end

-- A grouped queue: promote (2, 3 with nothing to lease), index (2g), take turns (3g),
-- then lease what the turns took.
local function claim_grouped()
  want = math.min(want, TURNS)
  local share = math.min(grant, want)
  grant, PROMOTE, URGENT = 0, GROUP_PROMOTE, GROUP_PROMOTE
  read_candidates()
  choose()
  write_moves()
  index_promoted()
  grant = share
  take_turns()
  lease()
  held_back()
end

-- 8. the reply: `out`'s head, the jobs set aside (aside() added them), the jobs claimed
local function reply()
  out[7] = (#out - 7) / 3
  for j = 1, #claimed do out[#out + 1] = claimed[j] end
  next_claim()
  if glim.refused > 0 then out[5] = 1 end
  return out
end

-- The steps.
local early = replayed() or paused_reply()
if early then return early end
grouped = grouped_queue()
limits()
if grouped then claim_grouped() else claim_plain() end
write_leases()
return reply()
