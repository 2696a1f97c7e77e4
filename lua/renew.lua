#!lua flags=allow-oom
-- renew.lua: extend the lease of a lock the owner still holds (the watchdog's call).
--
-- KEYS[1]  the lock hash `<ns>:{name}` (see acquire.lua)
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds; the expiry only ever moves later
--
-- Returns 1 when the owner holds the lock (its lease now lasts at least ARGV[2] ms),
-- 0 when it does not: the lease ended, the lock was force-unlocked, or KEYS[1] now
-- holds what distlock did not write (a value of another type, or a hash that
-- acquire.lua would call a conflict), which is left untouched. To the watchdog all
-- three are the loss of the lock: it stops renewing it and tells the guard.
--
-- allow-oom: a full server must keep honouring the leases it granted.

local lock, owner, lease = KEYS[1], ARGV[1], ARGV[2]

-- Whether `value` is an integer as distlock writes one: decimal, no sign but `-`, no
-- leading zero, no spaces, at most 18 digits (so that it never overflows). The same
-- check in every script.
local function integer(value)
  local digits = string.match(value, '^%-?([1-9]%d*)$')
  return value == '0' or (digits ~= nil and #digits <= 18)
end

-- Reads the lock hash: nil when it is not one distlock wrote; else the holder's
-- count for `owner` (nil: another owner, or none), whether anyone holds it, the
-- token, the holder's floor and its `#done` list.
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
        if field == owner then
          state.count = tonumber(value)
        end
      end
    end
  end
  if #fields > 0 and not state.held then
    return nil
  end
  return state
end

local fields = redis.pcall('HGETALL', lock)
if fields['err'] then
  return 0
end
local state = read(fields)
if not state or not state.count then
  return 0
end
redis.call('PEXPIRE', lock, lease, 'GT')
return 1
