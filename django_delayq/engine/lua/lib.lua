-- lib.lua : the blocks the scripts share (not a script itself).
--
-- Each block starts at a line "--@define <name>" and runs to the next such line. A script
-- names the blocks it needs with "--@include <name>" lines after its header; scripts.load
-- replaces each of those lines with its block (whose own --@include lines are filled the
-- same way), puts each block at most once in a script, and refuses a name not defined
-- here. The text above the first block is not sent to Redis.
--
-- Every script reads and checks what it found in Redis before its first write, so a
-- value planted by hand (or by a bug) can never make it fail half-way: Redis does not
-- roll a script back, and a script that errors after a write has committed that write.
--   * wrong_type: a key of the wrong type ends the script before any write, with the
--     error "DELAYQ-WRONGTYPE <KEYS index> <found> <expected>"; the Python side moves
--     that key aside and runs the script again (scripts.Script).
--   * bad_id / as_ms / bad_count: a job id, a score or an attempts value that cannot be
--     what django-delayq wrote; the scripts set such an entry aside, alone.

--@define ms_range
-- What a datetime can hold (years 1..9999), in ms; string forms for score ranges (Lua
-- prints numbers with 14 digits, too few for these).
local MIN_MS, MAX_MS = -62135596800000, 253402300799999
local MIN_MS_ARG, MAX_MS_ARG = '-62135596800000', '253402300799999'

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

--@define wrong_type
-- KEYS[i] must be of type kinds[i] (or absent); '' = not used by this script, not checked.
local function wrong_type(kinds)
  for i, kind in ipairs(kinds) do
    if kind ~= '' then
      local found = redis.call('TYPE', KEYS[i])['ok']
      if found ~= 'none' and found ~= kind then
        return redis.error_reply('DELAYQ-WRONGTYPE ' .. i .. ' ' .. found .. ' ' .. kind)
      end
    end
  end
  return nil
end

--@define as_ms
--@include ms_range
-- A score as integer ms, or nil when it is not a time (+-inf, out of a datetime's range).
local function as_ms(score)
  local n = tonumber(score)
  if n == nil or n ~= n or n < MIN_MS or n > MAX_MS then return nil end
  return math.floor(n)
end

--@define clamp_ms
--@include ms_range
local function clamp_ms(n)
  if n ~= n or n < MIN_MS then return MIN_MS end
  if n > MAX_MS then return MAX_MS end
  return math.floor(n)
end

--@define utf8_ok
-- Strict UTF-8 (what Python's decode accepts: no overlong forms, no surrogates).
local function utf8_ok(s)
  local i, n = 1, #s
  while i <= n do
    local c = string.byte(s, i)
    if c < 128 then
      i = i + 1
    else
      local len, lo, hi
      if c >= 194 and c <= 223 then len, lo, hi = 2, 128, 191
      elseif c == 224 then len, lo, hi = 3, 160, 191
      elseif c == 237 then len, lo, hi = 3, 128, 159
      elseif c >= 225 and c <= 239 then len, lo, hi = 3, 128, 191
      elseif c == 240 then len, lo, hi = 4, 144, 191
      elseif c >= 241 and c <= 243 then len, lo, hi = 4, 128, 191
      elseif c == 244 then len, lo, hi = 4, 128, 143
      else return false end
      if i + len - 1 > n then return false end
      local c2 = string.byte(s, i + 1)
      if c2 < lo or c2 > hi then return false end
      for j = i + 2, i + len - 1 do
        local cj = string.byte(s, j)
        if cj < 128 or cj > 191 then return false end
      end
      i = i + len
    end
  end
  return true
end

--@define bad_id
--@include utf8_ok
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

--@define bad_count
-- An attempts value (false = none yet) that is not a count: nil when it is fine.
local function bad_count(value)
  if not value then return nil end
  if #value > 15 or not string.find(value, '^%d+$') then
    return 'attempts value is not an integer'
  end
  return nil
end

--@define shown
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

--@define pending_head
-- The earliest pending job, {id, due} ({} when none): read before the script's writes.
local function pending_head(pending)
  return redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')
end

--@define wake
--@include pending_head
-- Tells the queue's wake channel `due` (nil: nothing was scheduled) when it is earlier
-- than `head` (pending_head before the writes), or when the job `moved` was that head.
local function wake_if_earliest(channel, due, head, moved)
  if due ~= nil and (head[2] == nil or due < tonumber(head[2]) or head[1] == moved) then
    redis.call('PUBLISH', channel, due)
  end
end

--@define forget
-- Forgets jobs that are final (done, cancelled, trimmed from dead, set aside as poison):
-- their envelope, attempts count (lease token) and cancel mark. Where they were listed
-- (pending, inflight, dead) is the caller's to clear. At most a few hundred ids a call.
local function forget(jobs, attempts, cancel, ids)
  if #ids == 0 then return end
  redis.call('HDEL', jobs, unpack(ids))
  redis.call('HDEL', attempts, unpack(ids))
  redis.call('SREM', cancel, unpack(ids))
end
