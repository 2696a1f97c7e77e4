#!lua flags=no-writes
-- inspect.lua: read the state of a lock without changing it.
--
-- KEYS[1]  the lock hash `<ns>:{name}` (see acquire.lua)
-- KEYS[2]  the fencing counter `<ns>:{name}:fence`
--
-- Returns
--   {0, 0, -2, 0, counter}              free; counter is the last fencing token issued (0: none)
--   {1, hold_count, pttl, token, counter}  held; pttl is the remaining lease in ms (-1: no
--                                       expiry), token the holder's fencing token (0: none)
--   {-2}                                a key holds a value of another type, or a hash
--                                       whose counts are not integers
-- Owner ids are never returned.

local lock, fence_key = KEYS[1], KEYS[2]

local counter = 0
local fence_kind = redis.call('TYPE', fence_key)['ok']
if fence_kind ~= 'none' then
  counter = fence_kind == 'string' and tonumber(redis.call('GET', fence_key))
  if not counter then
    return {-2}
  end
end

local kind = redis.call('TYPE', lock)['ok']
if kind == 'none' then
  return {0, 0, -2, 0, counter}
end
if kind ~= 'hash' then
  return {-2}
end
local count = 0
local fields = redis.call('HGETALL', lock)
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 1) ~= '#' then
    local n = tonumber(fields[i + 1])
    if not n then
      -- Not a lock distlock wrote: report it as foreign, never as a Lua error.
      return {-2}
    end
    count = count + n
  end
end
local token = tonumber(redis.call('HGET', lock, '#fence')) or 0
return {1, count, redis.call('PTTL', lock), token, counter}
