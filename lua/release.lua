-- release.lua: give back one hold of a lock; the last one frees it and tells waiters,
-- or hands it to the releasing client's next waiter.
--
-- Sent after lock.lua and shared.lua, under `#!lua flags=allow-oom`: a full server
-- must still let locks go. A lock that is a hash (a read-write lock or a semaphore,
-- see shared.lua) is released by `release_shared`; its successor is ignored.
--
-- One run gives back the holds of several releases, in order (the client sends the
-- releases that are ready at the same moment together, see lock-core/src/batch.rs);
-- each is applied, or not, exactly as if it ran alone.
--
-- KEYS     three or four per release, in order:
--   the lock `<ns>:{name}` (see lock.lua)
--   the release channel `<ns>:{name}:released`, passed as a key so that a cluster
--          routes it with the lock (same hash slot)
--   the last final release `<ns>:{name}:freed`: "<owner> <floor> <done...>", the
--          replay record of the holder that freed the lock, once another owner
--          took the tombstone (see lock.lua), or was handed the lock; for a lock
--          kept in a hash, this owner's own record `<ns>:{name}:freed:<owner>`
--          (see shared.lua)
--   the fencing counter `<ns>:{name}:fence`, only when the release has a successor
--          that asks for fencing
-- ARGV[1]  "PUBLISH", or "SPUBLISH" on a cluster
-- ARGV[2]  how long, in ms, the record of a final release lasts, for its retry
-- ARGV     then five per release, for release i ARGV[5i+3 .. 5i+7]:
--   owner id
--   lease in milliseconds to keep at least while holds remain
--   the operation's sequence number (see acquire.lua, "Exactly once")
--   the owner's floor (see acquire.lua)
--   the successor: "" for none, else "<owner> <lease> <seq> <floor> <fencing>
--          <who>", a
--          waiter of the releasing client (lock-core/src/handoff.rs) that takes
--          the lock if this release gives back the last hold and nobody else
--          listens on the channel (the releasing client's own subscriber is the
--          one listener): its owner id, its lease in ms, the number of the
--          hand-off among its operations (an acquire), its floor, "1" to be
--          given the next fencing token, and what its client says of it (see
--          lock.lua; may be empty)
--
-- Returns one answer per release, in order:
--   {1, remaining}  one hold given back, or this operation was applied before (a
--                   replay, also of the final release after the lock was freed);
--                   remaining 0 means the lock is free (a tombstone) and a
--                   message went out on the channel: "<owner>:<seq>" (for a fair
--                   lock with waiters, then a space and the next one's owner id),
--                   unique per release, so that a client hearing one release from several
--                   Redlock nodes wakes one waiter, and a later release is never
--                   taken for a repeat
--   {2, fence}      the last hold given back and the lock handed to the successor,
--                   with fencing token fence (0: none), or this was applied before
--                   and the successor holds the lock; no message
--   {-1}            this owner does not hold the lock, and this release was not
--                   applied (its lease ended, or it was force-unlocked or lost)
--   {-2}            the lock holds a value of another type, or a string distlock did
--                   not write (see lock.lua); left untouched
--
-- The message is published before the write, so a user without channel permission
-- changes nothing.

local publish, remember = ARGV[1], ARGV[2]
local numsub = 'NUMSUB'
if publish == 'SPUBLISH' then
  numsub = 'SHARDNUMSUB'
end

-- Whether `record` ("<owner> <floor> <done...>") says that operation `seq` of
-- `owner` was applied.
local function applied_in(record, owner, seq)
  local holder, done = string.match(record, '^(%S+) %S+ ?(.*)$')
  return holder == owner and in_done(done, seq)
end

-- Whether the only listener on `channel` is one client (the releasing one, whose
-- waiter is the successor): no waiter of another client is told of releases there.
local function alone_on(channel)
  local reply = redis.pcall('PUBSUB', numsub, channel)
  return type(reply) == 'table' and reply[2] == 1
end

-- One release of a hold of a read-write lock, a semaphore or a fair lock (see
-- shared.lua): as below, without a successor. A final release keeps its record in
-- the owner's field, and tells waiters when a writer, a permit or a fair lock's
-- holder left, or the last reader; a fair lock's message names its next waiter.
local function release_shared(lock, channel, freed, owner, lease, seq, seq_text, floor)
  local now = now_ms()
  local state = read_shared(lock, now)
  if not state or not state.kind then
    return {-2}
  end
  local me = state.holders[owner]
  if not me then
    local record = read_freed(freed)
    if record and in_done(record.done, seq) then
      return {1, 0}
    end
    return {-1}
  end
  local new_floor, done = record(me, floor, seq, seq_text)
  if not new_floor then
    return {1, me.count}
  end
  if me.count > 1 then
    me.count, me.floor, me.done = me.count - 1, new_floor, done
    me['until'] = math.max(me['until'], now + tonumber(lease))
    put_holder(lock, state, owner, me)
    settle_shared(lock, state, now)
    return {1, me.count}
  end
  state.holders[owner] = nil
  if me.mode ~= 'r' or not next(state.holders) then
    redis.call(publish, channel, release_message(state, owner, seq_text))
  end
  put_record(lock, freed, state, owner, new_floor, done, tonumber(remember))
  settle_shared(lock, state, now)
  return {1, 0}
end

-- One release: operation `seq_text` of `owner`, whose floor is `floor_text`;
-- `successor` the waiter it may hand the lock to (nil: none), as parsed below, and
-- `fence` that waiter's fencing counter.
local function release(lock, channel, freed, fence, owner, lease, seq_text, floor_text, successor)
  local seq, floor = tonumber(seq_text), tonumber(floor_text)
  local value = redis.pcall('GET', lock)
  if type(value) == 'table' then
    return release_shared(lock, channel, freed, owner, lease, seq, seq_text, floor)
  end
  local state = read(value, owner)
  if not state then
    return {-2}
  end

  if not state.count then
    -- Not held by this owner: was this release the final one, applied before? Its
    -- record is the tombstone, or moved to `freed` when another owner took that
    -- (or was handed the lock).
    local applied = state.freed and applied_in(state.freed, owner, seq)
    if not applied then
      local record = redis.pcall('GET', freed)
      applied = type(record) == 'string' and applied_in(record, owner, seq)
    end
    if not applied then
      return {-1}
    end
    if successor then
      -- The successor's owner id sent nothing of its own while this release was
      -- on its way: holding the lock, it was handed it by this release.
      local now = read(value, successor.owner)
      if now and now.count then
        return {2, now.token}
      end
    end
    return {1, 0}
  end

  local new_floor, done = record(state, floor, seq, seq_text)
  if not new_floor then
    -- Applied before (a replay), or settled: a stray copy, applied never again.
    return {1, state.count}
  end

  if state.count > 1 then
    local count = state.count - 1
    local meta = resolve(lock, state.meta)
    redis.call('SET', lock, encode(owner, count, state.token, new_floor, done, meta), 'KEEPTTL')
    redis.call('PEXPIRE', lock, lease, 'GT')
    return {1, count}
  end

  if successor and alone_on(channel) then
    local token = 0
    if successor.fencing == '1' then
      token = read_counter(fence)
    end
    if token then
      if successor.fencing == '1' then
        token = redis.call('INCR', fence)
      end
      redis.call('SET', freed, owner .. ' ' .. new_floor .. ' ' .. done, 'PX', remember)
      redis.call('SET', lock,
        encode(successor.owner, 1, token, successor.floor, successor.seq, new_meta(successor.who)),
        'PX', successor.lease)
      return {2, token}
    end
    -- A counter distlock did not write: free the lock as always; the waiter's own
    -- attempt reports the conflict.
  end

  redis.call(publish, channel, owner .. ':' .. seq_text)
  redis.call('SET', lock, tombstone(owner, new_floor, done), 'PX', remember)
  return {1, 0}
end

local answers = {}
local k = 0
for a = 3, #ARGV, 5 do
  local successor, fence = nil, nil
  local o, l, s, f, fencing, who = string.match(ARGV[a + 4], '^(%S+) (%d+) (%d+) (%d+) ([01]) ?(.*)$')
  if o then
    successor = { owner = o, lease = l, seq = s, floor = f, fencing = fencing, who = who }
    if fencing == '1' then
      fence = KEYS[k + 4]
    end
  end
  answers[#answers + 1] = release(
    KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], fence,
    ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], successor
  )
  if fence then
    k = k + 4
  else
    k = k + 3
  end
end
return answers
