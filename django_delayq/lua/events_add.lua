-- events_add.lua : append a batch of events to the capped event stream.
--
-- Not a job transition: the worker's and the API's signal receivers buffer events in
-- memory and a background thread writes them with a few calls of this script.
--
-- KEYS: events
-- events: the capped event stream of one prefix (GlobalKeys.events), or of one shard of a
-- sharded queue (QueueKeys.events).
-- ARGV[1]  maxlen    approximate cap (XADD MAXLEN ~)
-- ARGV[2..] events, each as: n (number of field/value pairs), f1, v1, ..., fn, vn
--
-- A malformed event (n not a count, or more pairs than are left), an XADD the stream
-- refuses (say an entry with the largest possible ID was planted in it), or an event past
-- the 25th ends the batch: what came before it is written, nothing after; the script
-- does not fail. A refusal that says the server cannot write for now (NOREPLICAS: too
-- few replicas in sync, READONLY: a replica now, LOADING, MASTERDOWN, TRYAGAIN,
-- CLUSTERDOWN; it meets the first XADD, so nothing was written) is the script's error
-- reply instead: the caller keeps the events for a retry, as on a lost connection.
-- (scripts.Script refuses a call of more events before it is sent; the
-- script holds the bound for a caller that sends it by other means.)
-- Returns: number of events written (fewer than sent: the rest was refused), or the
--          error reply of a server that cannot write for now (above)
-- Cost: at most 25 events and 800 arguments per call (scripts.MAX_EVENTS,
--       scripts.MAX_EVENT_ARGS; callers split bigger batches): O(total fields);
--       trimming is amortised by MAXLEN ~.
-- One table holds every XADD's arguments (an event's fields overwrite the last one's, and
-- unpack takes only its own): no table, and no garbage, per event.
local entry = {'XADD', events, 'MAXLEN', '~', ARGV[1], '*'}
local argc = #ARGV
local i = 2
local written = 0
local MAX_EVENTS = 25
while i <= argc and written < MAX_EVENTS do
  local n = tonumber(ARGV[i])
  if n == nil or n < 1 or n ~= math.floor(n) or i + 2 * n > argc then break end
  for j = 1, 2 * n do entry[6 + j] = ARGV[i + j] end
  local reply = redis.pcall(unpack(entry, 1, 6 + 2 * n))
  if type(reply) == 'table' and reply['err'] then
    local code = string.match(reply['err'], '^%u+')
    if written == 0 and (code == 'NOREPLICAS' or code == 'READONLY' or code == 'LOADING'
        or code == 'MASTERDOWN' or code == 'TRYAGAIN' or code == 'CLUSTERDOWN') then
      return reply
    end
    break
  end
  written = written + 1
  i = i + 2 * n + 1
end
return written
