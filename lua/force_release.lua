#!lua flags=allow-oom
-- force_release.lua: delete a lock whoever holds it, and wake its waiters (operators' tool).
--
-- KEYS[1]  the lock hash `<ns>:{name}` (see acquire.lua)
-- KEYS[2]  the release channel `<ns>:{name}:released`
-- ARGV[1]  "PUBLISH", or "SPUBLISH" on a cluster
--
-- Returns 1 when a lock was deleted, 0 when there was none, -2 when KEYS[1] holds a
-- value of another type (left untouched).

local lock, channel, publish = KEYS[1], KEYS[2], ARGV[1]

local kind = redis.call('TYPE', lock)['ok']
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return -2
end
redis.call(publish, channel, 'released')
redis.call('DEL', lock)
return 1
