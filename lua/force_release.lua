-- force_release.lua: delete a lock whoever holds it, and wake its waiters (operators' tool).
--
-- Sent after lock.lua, under `#!lua flags=allow-oom`.
--
-- KEYS[1]  the lock `<ns>:{name}` (see lock.lua)
-- KEYS[2]  the release channel `<ns>:{name}:released`
-- ARGV[1]  "PUBLISH", or "SPUBLISH" on a cluster
--
-- Returns 1 when a lock was deleted, 0 when there was none, -2 when KEYS[1] holds
-- what distlock did not write (a value of another type, or a string that lock.lua's
-- `read` does not accept), left untouched.

local lock, channel, publish = KEYS[1], KEYS[2], ARGV[1]

local state = read_lock(lock, nil)
if not state then
  return -2
end
if not state.held then
  return 0
end
redis.call(publish, channel, 'released')
redis.call('DEL', lock)
return 1
