#!lua flags=allow-oom
-- renew.lua: extend the lease of a lock the owner still holds (the watchdog's call).
--
-- KEYS[1]  the lock hash `<ns>:{name}` (see acquire.lua)
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds; the expiry only ever moves later
--
-- Returns 1 when the owner holds the lock (its lease now lasts at least ARGV[2] ms),
-- 0 when it does not (the lease ended, or the lock was force-unlocked).
--
-- allow-oom: a full server must keep honouring the leases it granted.

local lock, owner, lease = KEYS[1], ARGV[1], ARGV[2]

if redis.call('TYPE', lock)['ok'] ~= 'hash' then
  return 0
end
if redis.call('HEXISTS', lock, owner) == 0 then
  return 0
end
redis.call('PEXPIRE', lock, lease, 'GT')
return 1
