-- release.lua: give back one hold of a lock; the last one frees it and tells waiters.
--
-- Sent after lock.lua, under `#!lua flags=allow-oom`: a full server must still let
-- locks go.
--
-- One run gives back the holds of several releases, in order (the client sends the
-- releases that are ready at the same moment together, see lock-core/src/batch.rs);
-- each is applied, or not, exactly as if it ran alone.
--
-- KEYS     three per release, for release i (from 0) KEYS[3i+1 .. 3i+3]:
--   the lock `<ns>:{name}` (see lock.lua)
--   the release channel `<ns>:{name}:released`, passed as a key so that a cluster
--          routes it with the lock (same hash slot)
--   the last final release `<ns>:{name}:freed`: "<owner> <floor> <done...>", the
--          replay record of the holder that freed the lock, once another owner
--          took the tombstone (see lock.lua); read only
-- ARGV[1]  "PUBLISH", or "SPUBLISH" on a cluster
-- ARGV[2]  how long, in ms, the tombstone of a final release lasts, for its retry
-- ARGV     then four per release, for release i ARGV[4i+3 .. 4i+6]:
--   owner id
--   lease in milliseconds to keep at least while holds remain
--   the operation's sequence number (see acquire.lua, "Exactly once")
--   the owner's floor (see acquire.lua)
--
-- Returns one answer per release, in order:
--   {1, remaining}  one hold given back, or this operation was applied before (a
--                   replay, also of the final release after the lock was freed);
--                   remaining 0 means the lock is free (a tombstone) and a
--                   message went out on the channel: "<owner>:<seq>", unique per
--                   release, so that a client hearing one release from several
--                   Redlock nodes wakes one waiter, and a later release is never
--                   taken for a repeat
--   {-1}            this owner does not hold the lock, and this release was not
--                   applied (its lease ended, or it was force-unlocked or lost)
--   {-2}            the lock holds a value of another type, or a string distlock did
--                   not write (see lock.lua); left untouched
--
-- The message is published before the write, so a user without channel permission
-- changes nothing.

local publish, remember = ARGV[1], ARGV[2]

-- Whether `record` ("<owner> <floor> <done...>") says that operation `seq` of
-- `owner` was applied.
local function applied_in(record, owner, seq)
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

-- One release: operation `seq_text` of `owner`, whose floor is `floor_text`.
local function release(lock, channel, freed, owner, lease, seq_text, floor_text)
  local seq, floor = tonumber(seq_text), tonumber(floor_text)
  local state = read_lock(lock, owner)
  if not state then
    return {-2}
  end

  if not state.count then
    -- Not held by this owner: was this release the final one, applied before? Its
    -- record is the tombstone, or moved to `freed` when another owner took that.
    if state.freed and applied_in(state.freed, owner, seq) then
      return {1, 0}
    end
    local record = redis.pcall('GET', freed)
    if type(record) == 'string' and applied_in(record, owner, seq) then
      return {1, 0}
    end
    return {-1}
  end

  local new_floor, done = record(state, floor, seq, seq_text)
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

  redis.call(publish, channel, owner .. ':' .. seq_text)
  redis.call('SET', lock, tombstone(owner, new_floor, done), 'PX', remember)
  return {1, 0}
end

local answers = {}
for i = 0, #KEYS / 3 - 1 do
  local k, a = 3 * i, 4 * i + 2
  answers[i + 1] = release(
    KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  )
end
return answers
