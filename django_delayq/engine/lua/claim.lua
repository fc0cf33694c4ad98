-- claim.lua : take up to `limit` due jobs and lease them to the caller.
--
-- KEYS[1]..[7]  the queue's keys, in their one order (keys.QueueKeys.script_keys); used:
-- KEYS[1]  pending   ZSET  due_ms -> id
-- KEYS[2]  inflight  ZSET  lease_deadline_ms -> id
-- KEYS[3]  jobs      HASH  id -> envelope (absent for jobs whose payload is elsewhere)
-- KEYS[4]  attempts  HASH  id -> deliveries so far (the lease token)
-- KEYS[5]  cancel    SET   ids whose cancel was asked while they ran (a removed id's mark)
-- KEYS[6]  dead      ZSET  died_ms -> id
-- ARGV[1]  now_ms    integer ms, or "0" to read the server's TIME
-- ARGV[2]  limit     most jobs to claim (1..200; more is capped)
-- ARGV[3]  lease_ms  lease length; the job is redelivered if not settled or extended by then
--
-- Each claimed job gets attempts + 1; that number is its lease token for ack/nack/extend.
-- The batch is read and checked before the first write. A poison entry is set aside
-- alone, without being charged an attempt, and the rest of the batch is claimed: an id
-- that cannot be a job id (empty, over 256 bytes, control characters, not UTF-8) is
-- removed; a job whose score is not a time (-inf, +inf, outside years 1..9999), whose
-- attempts value is not an integer or whose envelope is not UTF-8 goes to dead (a bad
-- attempts value dropped). Entries scored past year 9999 never come due: up to 10 of
-- them are set aside per call too.
-- Returns: {now_ms, next_due_ms (-1 when none), n_aside,
--           n_aside triples: id, reason, removed (1 removed, 0 moved to dead),
--           then per claimed job: id, due_ms, token, envelope}
--          envelope "" = not in Redis: the caller loads the payload (the audit row);
--          a removed id is shown ASCII-escaped and cut to 64 bytes (it is for the log)
-- Cost: at most 200 jobs per call (scripts.MAX_CLAIM) plus 10 set aside:
--       O(limit * log N); due jobs are the score range (-inf, now] of pending (no
--       separate "promote" step), read with LIMIT.
--@include now
--@include ms_range
--@include wrong_type
--@include as_ms
--@include bad_id
--@include bad_count
--@include utf8_ok
--@include shown
--@include call_many
--@include pending_head
--@include forget
local pending, inflight, jobs, attempts, cancel, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4],
                                                        KEYS[5], KEYS[6]
local err = wrong_type({'zset', 'zset', 'hash', 'hash', 'set', 'zset'})
if err then return err end
local now = now_ms(ARGV[1])
local limit = math.max(1, math.min(tonumber(ARGV[2]) or 1, 200))
local deadline = now + tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
local tail = {}
if now <= MAX_MS then
  tail = redis.call('ZRANGEBYSCORE', pending, '(' .. MAX_MS_ARG, '+inf', 'WITHSCORES',
                    'LIMIT', 0, 10)
end
local ids, scores = {}, {}
for i = 1, #due, 2 do ids[#ids + 1] = due[i]; scores[#scores + 1] = due[i + 1] end
local tail_ids = {}
for i = 1, #tail, 2 do
  ids[#ids + 1] = tail[i]; scores[#scores + 1] = tail[i + 1]; tail_ids[#tail_ids + 1] = tail[i]
end
local out = {now, -1, 0}
if #ids > 0 then
  local envs = {}
  if redis.call('EXISTS', jobs) == 1 then envs = redis.call('HMGET', jobs, unpack(ids)) end
  local counts = redis.call('HMGET', attempts, unpack(ids))
  local lease_at = string.format('%.0f', deadline)  -- one string, not one per job
  local leased, tokens, gone, died, reset, claimed = {}, {}, {}, {}, {}, {}
  local nl, nj, no = 0, 0, 3
  for j = 1, #ids do
    local id = ids[j]
    local why = bad_id(id)
    if why then
      gone[#gone + 1] = id
      out[no + 1] = shown(id); out[no + 2] = why; out[no + 3] = 1; no = no + 3
    else
      local due_ms = as_ms(scores[j])
      why = bad_count(counts[j])
      if why then reset[#reset + 1] = id end
      if due_ms == nil then why = 'due score ' .. scores[j] .. ' is not a time' end
      local env = envs[j]
      if env and string.find(env, '[\128-\255]') and not utf8_ok(env) then
        why = 'envelope is not UTF-8'
      end
      if why then
        died[#died + 1] = now; died[#died + 1] = id
        out[no + 1] = id; out[no + 2] = why; out[no + 3] = 0; no = no + 3
      else
        local token = (tonumber(counts[j]) or 0) + 1
        leased[nl + 1] = lease_at; leased[nl + 2] = id
        tokens[nl + 1] = id; tokens[nl + 2] = token
        nl = nl + 2
        claimed[nj + 1] = id; claimed[nj + 2] = due_ms; claimed[nj + 3] = token
        claimed[nj + 4] = envs[j] or ''
        nj = nj + 4
      end
    end
  end
  out[3] = #gone + #died / 2
  -- writes: everything above was only read
  if #due > 0 then redis.call('ZREMRANGEBYRANK', pending, 0, #due / 2 - 1) end
  if #tail_ids > 0 then redis.call('ZREM', pending, unpack(tail_ids)) end
  if nl > 0 then
    call_many('HSET', attempts, {}, tokens)
    call_many('ZADD', inflight, {}, leased)
  end
  if #died > 0 then call_many('ZADD', dead, {}, died) end
  if #reset > 0 then redis.call('HDEL', attempts, unpack(reset)) end
  forget(jobs, attempts, cancel, gone)
  for j = 1, nj do out[no + j] = claimed[j] end
end
local head = pending_head(pending)
if head[2] then
  local first = as_ms(head[2])
  if first ~= nil then out[2] = first
  elseif tonumber(head[2]) < 0 then out[2] = now end  -- -inf left over: claim again now
end
return out
