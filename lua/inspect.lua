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
--   {-2}                                a key holds a value of another type, or KEYS[1]
--                                       a hash that acquire.lua would call a conflict,
--                                       or KEYS[2] a string that is not a counter (an
--                                       integer, not negative)
-- Owner ids are never returned.

local lock, fence_key = KEYS[1], KEYS[2]
-- Whether `value` is an integer as distlock writes one: decimal, no sign but `-`, no
-- leading zero, no spaces, at most 18 digits (so that it never overflows). The same
-- check in every script.
local function integer(value)
  local digits = string.match(value, '^%-?([1-9]%d*)$')
  return value == '0' or (digits ~= nil and #digits <= 18)
end

-- Reads the lock hash as acquire.lua does: nil when it is not one distlock wrote;
-- else whether anyone holds it, the holder's count, the token, floor and `#done`.
local function read(fields)
  local state = { held = false, token = 0, floor = 0, done = '' }
  for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    if field == '#done' then
      if not string.match(value, '^[%d ]*$') then
        return nil
      end
      state.done = value
    elseif field == '#fence' or field == '#floor' or string.sub(field, 1, 1) ~= '#' then
      if not integer(value) then
        return nil
      end
      if field == '#fence' then
        state.token = tonumber(value)
      elseif field == '#floor' then
        state.floor = tonumber(value)
      else
        state.held = true
        state.count = (state.count or 0) + tonumber(value)
      end
    end
  end
  if #fields > 0 and not state.held then
    return nil
  end
  return state
end

local counter = redis.pcall('GET', fence_key)
if type(counter) == 'table' or (counter and not (integer(counter) and string.sub(counter, 1, 1) ~= '-')) then
  return {-2}
end
counter = tonumber(counter) or 0

local fields = redis.pcall('HGETALL', lock)
if fields['err'] then
  return {-2}
end
local state = read(fields)
if not state then
  return {-2}
end
if not state.held then
  return {0, 0, -2, 0, counter}
end
return {1, state.count, redis.call('PTTL', lock), state.token, counter}
