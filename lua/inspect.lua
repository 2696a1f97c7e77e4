-- inspect.lua: read the state of a lock without changing it.
--
-- Sent after lock.lua, under `#!lua flags=no-writes`.
--
-- KEYS[1]  the lock `<ns>:{name}` (see lock.lua)
-- KEYS[2]  the fencing counter `<ns>:{name}:fence`
--
-- Returns
--   {0, 0, -2, 0, counter}              free; counter is the last fencing token issued (0: none)
--   {1, hold_count, pttl, token, counter}  held; pttl is the remaining lease in ms (-1: no
--                                       expiry), token the holder's fencing token (0: none)
--   {-2}                                a key holds a value of another type, or KEYS[1]
--                                       a string that lock.lua's `read` does not accept,
--                                       or KEYS[2] a string that is not a counter (an
--                                       integer, not negative)
-- Owner ids are never returned.

local lock, fence_key = KEYS[1], KEYS[2]
local counter = read_counter(fence_key)
if not counter then
  return {-2}
end

local state = read_lock(lock, nil)
if not state then
  return {-2}
end
if not state.held then
  return {0, 0, -2, 0, counter}
end
return {1, state.total, redis.call('PTTL', lock), state.token, counter}
