-- mark.lua : start marks: the runs of these deliveries start now (their worker writes
-- this before calling the functions; lua/recover.lua charges a lost delivery an attempt
-- only when its run was marked).
--
-- KEYS: attempts runs inflight
-- ARGV[1..] triples: id, token, offset (token - attempt: what claim.lua read)
--
-- A mark is written only while the job is held under that token: in flight (inflight
-- holds its id) and its counter that token. One arriving after its job ended (it travels
-- on a connection of its own, maybe behind the job's ack), after its lease passed to
-- another delivery, or after the delivery was given back (give_back.lua keeps the counter
-- while the job waits: a late mark would overwrite the runs entry's raised offset, and
-- the next claim's attempt number would be one too many) writes nothing, so no entry
-- outlives its job or its delivery.
-- Returns: the number of marks written (the stream's connection never reads it).
-- Cost: at most 100 triples per call (scripts.MAX_MARK): O(n log N). One triple (a job
-- thread's mark, the usual call) is one HGET and one ZSCORE, and one HSET when held.
-- Key types: none is typed first (a usual call is one HGET and one ZSCORE, and one HSET):
-- a read, or the one write, meeting a key of the wrong type fails alone, having written
-- nothing, and the call ends with wrong_type's reply (the engine moves the key aside).
local function marks()
  if #ARGV == 3 then  -- one mark: no tables
    if redis.call('HGET', attempts, ARGV[1]) ~= ARGV[2] then return 0 end
    if not redis.call('ZSCORE', inflight, ARGV[1]) then return 0 end  -- given back: waits
    redis.call('HSET', runs, ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' 0')  -- started: no streak
    return 1
  end
  local ids = {}
  for i = 1, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
  local tokens = redis.call('HMGET', attempts, unpack(ids))
  local leased = redis.call('ZMSCORE', inflight, unpack(ids))
  local written = {}
  for j, id in ipairs(ids) do
    local i = 3 * j - 2
    if leased[j] and tokens[j] == ARGV[i + 1] then
      written[#written + 1] = id
      written[#written + 1] = ARGV[i + 1] .. ' ' .. ARGV[i + 2] .. ' 0'  -- started: no streak
    end
  end
  if #written > 0 then redis.call('HSET', runs, unpack(written)) end
  return #written / 2
end

if #ARGV == 0 then return 0 end
local ok, n = pcall(marks)
if not ok then return read_failed(KINDS, n) end
return n
