-- release.lua: give back one hold of a lock; the last one frees it and tells waiters.
--
-- Sent after lock.lua, under `#!lua flags=allow-oom`: a full server must still let
-- locks go.
--
-- KEYS[1]  the lock `<ns>:{name}` (see lock.lua)
-- KEYS[2]  the release channel `<ns>:{name}:released`, passed as a key so that a
--          cluster routes it with the lock (same hash slot)
-- KEYS[3]  the last final release `<ns>:{name}:freed`: "<owner> <floor> <done...>",
--          the replay record of the holder that freed the lock, once another owner
--          took the tombstone (see lock.lua); read only
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds to keep at least while holds remain
-- ARGV[3]  the operation's sequence number (see acquire.lua, "Exactly once")
-- ARGV[4]  the owner's floor (see acquire.lua)
-- ARGV[5]  "PUBLISH", or "SPUBLISH" on a cluster
-- ARGV[6]  how long, in ms, the tombstone of a final release lasts, for its retry
--
-- Returns
--   {1, remaining}  one hold given back, or this operation was applied before (a
--                   replay, also of the final release after the lock was freed);
--                   remaining 0 means the lock is free (a tombstone) and a
--                   message went out on
--                   KEYS[2]: "<owner>:<seq>", unique per release, so that a client
--                   hearing one release from several Redlock nodes wakes one waiter,
--                   and a later release is never taken for a repeat
--   {-1}            this owner does not hold the lock, and this release was not
--                   applied (its lease ended, or it was force-unlocked or lost)
--   {-2}            KEYS[1] holds a value of another type, or a string distlock did
--                   not write (see lock.lua); left untouched
--
-- The message is published before the write, so a user without channel permission
-- changes nothing.

local lock, channel, freed = KEYS[1], KEYS[2], KEYS[3]
local owner, lease = ARGV[1], ARGV[2]
local seq, floor, publish, remember = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]

-- Whether `record` ("<owner> <floor> <done...>") says that this operation of
-- `owner` was applied.
local function applied_in(record)
  local words = string.gmatch(record, '%S+')
  if words() ~= owner then
    return false
  end
  words()
  for n in words do
    if tonumber(n) == seq then
      return true
    end
  end
  return false
end

local state = read_lock(lock, owner)
if not state then
  return {-2}
end

if not state.count then
  -- Not held by this owner: was this release the final one, applied before? Its
  -- record is the tombstone, or moved to KEYS[3] when another owner took that.
  if state.freed and applied_in(state.freed) then
    return {1, 0}
  end
  local record = redis.pcall('GET', freed)
  if type(record) == 'string' and applied_in(record) then
    return {1, 0}
  end
  return {-1}
end

local new_floor, done = record(state, floor, seq, ARGV[3])
if not new_floor then
  -- Applied before (a replay), or settled: a stray copy, applied never again.
  return {1, state.count}
end

if state.count > 1 then
  local count = state.count - 1
  redis.call('SET', lock, encode(owner, count, state.token, new_floor, done), 'KEEPTTL')
  redis.call('PEXPIRE', lock, lease, 'GT')
  return {1, count}
end

redis.call(publish, channel, owner .. ':' .. ARGV[3])
redis.call('SET', lock, '- ' .. owner .. ' ' .. new_floor .. ' ' .. done, 'PX', remember)
return {1, 0}
