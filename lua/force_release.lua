-- force_release.lua: delete a lock whoever holds it, and wake its waiters (operators' tool).
--
-- Sent after lock.lua and shared.lua, under `#!lua flags=allow-oom`.
--
-- KEYS[1]  the lock `<ns>:{name}` (see lock.lua)
-- KEYS[2]  the release channel `<ns>:{name}:released`
-- ARGV[1]  "PUBLISH", or "SPUBLISH" on a cluster
--
-- A read-write lock, a semaphore or a fair lock loses every holder (and a fair lock
-- its queue) at once.
--
-- Returns 1 when a lock was deleted, 0 when there was none, -2 when KEYS[1] holds
-- what distlock did not write (a value of another type, or a string that lock.lua's
-- `read` does not accept), left untouched.

local lock, channel, publish = KEYS[1], KEYS[2], ARGV[1]

local value = redis.pcall('GET', lock)
if type(value) == 'table' then
  -- A lock kept in a hash (see shared.lua): every holder goes.
  local shared = read_shared(lock, now_ms())
  if not shared or not shared.kind then
    return -2
  end
  if not next(shared.holders) then
    return 0
  end
  redis.call(publish, channel, 'released')
  redis.call('DEL', lock)
  return 1
end
local state = read(value, nil)
if not state then
  return -2
end
if not state.held then
  return 0
end
redis.call(publish, channel, 'released')
redis.call('DEL', lock)
return 1
