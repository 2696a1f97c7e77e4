-- renew.lua: extend the lease of a lock the owner still holds (the watchdog's call).
--
-- Sent after lock.lua and shared.lua, under `#!lua flags=allow-oom`: a full server
-- must keep honouring the leases it granted.
--
-- KEYS[1]  the lock `<ns>:{name}`: a string (see lock.lua), or a hash whose holders
--          each have a lease of their own (see shared.lua)
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds; the expiry only ever moves later
--
-- Returns 1 when the owner holds the lock (its lease now lasts at least ARGV[2] ms),
-- 0 when it does not: the lease ended, the lock was force-unlocked, or KEYS[1] now
-- holds what distlock did not write (a value of another type, or a string or hash
-- that lock.lua's `read` or shared.lua's `read_shared` does not accept), which is
-- left untouched. To the watchdog all
-- three are the loss of the lock: it stops renewing it and tells the guard.

local lock, owner, lease = KEYS[1], ARGV[1], ARGV[2]

local value = redis.pcall('GET', lock)
if type(value) == 'table' then
  -- A lock kept in a hash (see shared.lua): the holder's own lease.
  local now = now_ms()
  local shared = read_shared(lock, now)
  local me = shared and shared.holders[owner]
  if not me then
    return 0
  end
  me['until'] = math.max(me['until'], now + tonumber(lease))
  put_holder(lock, shared, owner, me)
  settle_shared(lock, shared, now)
  return 1
end
local state = read(value, owner)
if not state or not state.count then
  return 0
end
if state.meta and string.sub(state.meta, 1, 1) == '?' then
  -- Taken by the client's own write: its time becomes known before the expiry moves.
  redis.call('SET', lock,
    encode(owner, state.count, state.token, string.format('%d', state.floor), state.done,
      resolve(lock, state.meta)),
    'KEEPTTL')
end
redis.call('PEXPIRE', lock, lease, 'GT')
return 1
