-- fenced_store.lua: a value that only the newest lock holder can read for update and write.
--
--   EVAL <script> 1 <key> GET <token>          -> the value (nil if unset)
--   EVAL <script> 1 <key> SET <token> <value>  -> 1
--
-- <key> is a hash with fields `value` and `token` (the highest fencing token seen). Both reads
-- and writes record their token, and any call with a token lower than one already seen fails
-- with "STALE ...": a holder that was paused past its lease can neither read-for-update nor
-- write after a newer holder touched the value. Registering reads matters: without it, a stale
-- holder's write could still land between the new holder's read and write (a lost update).
-- Tokens from redis-lock stay below 2^53, so Lua's numbers compare them exactly.
local op = ARGV[1]
if op ~= 'GET' and op ~= 'SET' then
  return redis.error_reply('ERR unknown operation, use GET or SET')
end
local token = tonumber(ARGV[2])
if token == nil or token <= 0 or token ~= math.floor(token) or token >= 2^53 then
  return redis.error_reply('ERR token must be a positive integer below 2^53')
end
if op == 'SET' and ARGV[3] == nil then
  return redis.error_reply('ERR SET needs a value')
end
local seen = redis.call('HGET', KEYS[1], 'token')
if seen and token < tonumber(seen) then
  return redis.error_reply('STALE token ' .. ARGV[2] .. ' is older than ' .. seen)
end
if not seen or token > tonumber(seen) then
  redis.call('HSET', KEYS[1], 'token', ARGV[2])
end
if op == 'GET' then
  return redis.call('HGET', KEYS[1], 'value')
end
redis.call('HSET', KEYS[1], 'value', ARGV[3])
return 1
