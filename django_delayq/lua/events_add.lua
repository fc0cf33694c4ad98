-- events_add.lua : append a batch of events to the capped event stream.
--
-- Not a job transition: the worker's and the API's signal receivers buffer events in
-- memory and a background thread writes them with one call of this script.
--
-- KEYS[1]  events    STREAM  the capped event stream of one prefix
-- ARGV[1]  maxlen    approximate cap (XADD MAXLEN ~)
-- ARGV[2..] events, each as: n (number of field/value pairs), f1, v1, ..., fn, vn
--
-- Returns: number of events written
-- Cost: O(total fields of the batch); trimming is amortised by MAXLEN ~.
local maxlen = ARGV[1]
local i = 2
local written = 0
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local entry = {'XADD', KEYS[1], 'MAXLEN', '~', maxlen, '*'}
  for j = 1, 2 * n do entry[6 + j] = ARGV[i + j] end
  redis.call(unpack(entry))
  written = written + 1
  i = i + 2 * n + 1
end
return written
