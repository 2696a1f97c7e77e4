-- renew.lua: extend the lease of a lock the owner still holds (the watchdog's call).
--
-- Sent after lock.lua (the layout), under `#!lua flags=allow-oom`: a full server
-- must keep honouring the leases it granted.
--
-- KEYS[1]  the lock `<ns>:{name}` (see lock.lua)
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds; a lease only ever moves later
--
-- Returns 1 when the owner holds the lock (its lease now lasts at least ARGV[2] ms),
-- 0 when it does not: the lease ended, the lock was force-unlocked, or KEYS[1] now
-- holds what distlock did not write (see lock.lua), which is left untouched. To the
-- watchdog all three are the loss of the lock: it stops renewing it and tells the
-- guard.

local lock, owner, lease = KEYS[1], ARGV[1], tonumber(ARGV[2])

local state = read_mine(lock, owner)
local me = state and state.me
if not me then
  return 0
end
if not me['until'] then
  redis.call('PEXPIRE', lock, lease, 'GT')
  return 1
end
-- A holder with a lease of its own (read-write, semaphore, fair).
local now = now_ms()
if me['until'] <= now then
  return 0
end
local until_ms = math.max(me['until'], now + lease)
redis.call('HSET', lock, UNTIL .. owner, until_ms)
redis.call('PEXPIRE', lock, until_ms - now, 'GT')
return 1
