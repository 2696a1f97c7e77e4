-- acquire.lua: take a lock, or re-enter one the caller already holds.
--
-- The client sends this text after lock.lua (how every script reads a lock), under
-- one of two first lines: `#!lua` for a new acquisition (refused as a whole on a
-- server over `maxmemory` with `noeviction`: a new lock adds data) and
-- `#!lua flags=allow-oom` for a re-entry, which only ever raises the count of a lock
-- that exists, so that a full server still lets a holder re-enter. A first
-- acquisition without fencing is tried with a plain `SET NX` first (see lock.lua);
-- this script runs when that did not take the lock, and for every other case.
--
-- KEYS[1]  the lock `<ns>:{name}` (see lock.lua)
-- KEYS[2]  the fencing counter `<ns>:{name}:fence`; read and written only when
--          ARGV[3] is "1" and the lock is free
-- KEYS[3]  the last final release `<ns>:{name}:freed` (see release.lua): written
--          only when this call takes a tombstone, whose record moves there
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds, validated by the client (10 ..= the documented maximum)
-- ARGV[3]  "1": issue a fencing token when this call creates the lock; "0": do not
-- ARGV[4]  the operation's sequence number: 1, 2, 3, ... per owner id, one per
--          acquire, re-entry or release of that owner (a retry keeps its number)
-- ARGV[5]  the owner's floor: every operation of this owner numbered at or below it
--          is settled (its outcome is known to the client, or given up), so it is
--          never applied from now on
-- ARGV[6]  "1": the caller believes it holds the lock already (a re-entry), so the
--          lock is never created here; "0": an ordinary acquire
-- ARGV[7]  what the client says of the holder, "<pid> <service> <host> <site>",
--          kept with a lock this call creates (see lock.lua); may be absent
--
-- Returns
--   {1, hold_count, fence}  acquired, or this operation was applied before (a
--                           replay); fence is 0 without fencing
--   {0, pttl}               held by another owner; pttl is its remaining lease in ms
--                           (-1 when the lock has no expiry), the waiter's sleep cap
--   {-1}                    re-entry asked, but this owner no longer holds the lock
--   {-2}                    KEYS[1] or KEYS[2] holds a value of another type, or
--                           KEYS[1] a string distlock did not write (see lock.lua),
--                           or KEYS[2] a string that is not a counter; both untouched
--
-- Exactly once. A reply can be lost and the operation retried or replayed (by the
-- client, or by a cluster connection on its own), and operations of one owner can
-- overlap (`join!` branches re-entering, a dropped guard's background release). So
-- every operation carries its owner's sequence number, and the lock keeps, for its
-- holder, the numbers applied above the holder's floor (done) and the floor itself
-- (the highest ever sent). An operation is applied only if its number is above the
-- floor and not in done; then its number joins done, and numbers at or below the
-- new floor leave it. Each number is thus applied at most once, whatever the order
-- of arrivals: above the floor done remembers it, at or below the floor nothing is
-- applied. The record stays small: the client raises the floor as outcomes become
-- known, so done holds only the operations still in doubt, whatever the number of
-- re-entries of a long-held lock; and it dies with the lock (release.lua keeps the
-- last holder's record for a short while, for the retry of a final release).
--
-- Every check comes before the first write: a Lua error does not roll back.

local lock, fence_key, freed = KEYS[1], KEYS[2], KEYS[3]
local owner, lease, fencing = ARGV[1], ARGV[2], ARGV[3]
local seq, floor, reentry = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]

local state = read_lock(lock, owner)
if not state then
  return {-2}
end

if not state.held then
  if reentry == '1' then
    return {-1}
  end
  if fencing == '1' and not read_counter(fence_key) then
    return {-2}
  end
  local token = take(lock, fence_key, freed, state, owner, lease, fencing == '1', ARGV[5], ARGV[4], ARGV[7])
  return {1, 1, token}
end

if not state.count then
  if reentry == '1' then
    return {-1}
  end
  return {0, redis.call('PTTL', lock)}
end

-- A replay, or a settled stray copy, answers the count as it stands.
return {1, add_hold(lock, state, owner, lease, floor, seq, ARGV[4]), state.token}
