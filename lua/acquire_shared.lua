-- acquire_shared.lua: take a read or write hold of a read-write lock, a permit of a
-- semaphore or a fair lock, or re-enter one the caller already holds (see
-- shared.lua).
--
-- Sent after lock.lua and shared.lua, under `#!lua` for a new acquisition and
-- `#!lua flags=allow-oom` for a re-entry, as acquire.lua is.
--
-- KEYS and ARGV[1] to ARGV[6] are acquire.lua's: the lock, its fencing counter, and
-- this owner's record `<ns>:{name}:freed:<owner>` (see shared.lua); owner id, lease in ms, "1" for a fencing token (write holds and fair locks
-- only), the operation's number, the owner's floor, "1" for a re-entry. Then:
-- ARGV[7]  what to take: "r" a read hold, "w" the write hold, "p<permits>" a
--          permit of a semaphore of that many permits, "f" a fair lock
-- ARGV[8]  for a read hold, the owner id of the write hold that the caller's call
--          chain holds (a downgrade: the reader enters beside its own writer), or ""
-- ARGV[9]  "1": the caller waits if it cannot take it now, so a writer or a fair
--          waiter keeps its place (see shared.lua); "0": it gives up at once (a
--          `try`), and keeps none
-- ARGV[10] what the client says of the holder, "<pid> <service> <host> <site>", kept
--          with a new hold (see lock.lua); may be absent
--
-- Returns acquire.lua's replies, and two of its own:
--   {1, hold_count, fence}  taken or re-entered, or applied before (a replay)
--   {0, pttl}               not now: look again within pttl ms (a holder's lease,
--                           or at most WAITER_LOOK_MS for a waiter that keeps its
--                           place, so that its place stays alive)
--   {-1}                    re-entry asked, but the owner no longer holds it
--   {-2}                    the key holds a value of another type or of another
--                           kind (a plain lock, a semaphore for a read-write lock),
--                           or a fencing counter that is not one; untouched
--   {-3}                    the owner holds the lock in another mode (a read hold
--                           asking for the write hold: an upgrade, refused)
--   {-4, permits}           a semaphore with holders counts `permits` permits, not
--                           the number asked; untouched
--
-- A read hold enters unless a writer holds the lock, or one waits (a downgrade
-- enters beside its own writer). The write hold is taken when nobody holds the lock;
-- a writer that waits keeps its place, which stops new readers. A permit is taken
-- while fewer owners than `permits` hold one; a semaphore with no holder takes the
-- permit count of the next acquisition. A fair lock is taken when nobody holds it and
-- no live waiter came before (the lowest ticket is next); a waiter that waits keeps
-- its place (its ticket) for as long as it keeps looking.
--
-- Every check comes before the first write.

local lock, fence_key, freed = KEYS[1], KEYS[2], KEYS[3]
local owner, lease, fencing = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local seq, floor, reentry = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local want, parent, stays = ARGV[7], ARGV[8], ARGV[9] == '1'
local who = ARGV[10]

local mode = string.sub(want, 1, 1)
local kind, permits = 'rw', nil
if mode == 'p' then
  kind, permits = 'sem', tonumber(string.sub(want, 2))
elseif mode == 'f' then
  kind = 'fair'
end

local now = now_ms()
local state = read_shared(lock, now)
if not state or (state.kind and state.kind ~= kind) then
  return {-2}
end
if fencing == '1' and not read_counter(fence_key) then
  return {-2}
end
if kind == 'sem' and state.kind and state.permits ~= permits and next(state.holders) then
  return {-4, state.permits}
end

local me = state.holders[owner]
if me then
  if me.mode ~= mode then
    return {-3}
  end
  local new_floor, done = record(me, floor, seq, ARGV[4])
  if new_floor then
    me.count, me.floor, me.done = me.count + 1, new_floor, done
    me['until'] = math.max(me['until'], now + lease)
    put_holder(lock, state, owner, me)
    settle_shared(lock, state, now)
  end
  return {1, me.count, me.token}
end
if reentry == '1' then
  return {-1}
end

-- How long to wait, when this owner may not take it now; whether it keeps a place.
local wait_ms, keeps = nil, false
local held, soonest, latest = holders_of(state, nil, now)
if mode == 'w' then
  if held > 0 then
    wait_ms, keeps = math.min(latest, WAITER_LOOK_MS), true
  end
elseif mode == 'r' then
  local writers, writer_left = holders_of(state, 'w', now)
  local own_writer = parent ~= '' and state.holders[parent] and state.holders[parent].mode == 'w'
  if writers > 0 and not own_writer then
    wait_ms = writer_left
  elseif not own_writer and writer_waits(state, owner) then
    wait_ms = WAITER_LOOK_MS
  end
elseif mode == 'p' then
  if held >= permits then
    wait_ms = soonest
  end
else
  local head = queue_head(state)
  if held > 0 or (head and head ~= owner) then
    wait_ms, keeps = WAITER_LOOK_MS, true
    if held > 0 then
      wait_ms = math.min(latest, WAITER_LOOK_MS)
    end
  end
end

if wait_ms then
  if keeps and stays then
    keep_place(lock, state, owner, now)
  end
  settle_shared(lock, state, now)
  return {0, wait_ms}
end

-- Take it. A record of this owner's final release (a replay of an operation of
-- an owner that held it before) carries over, so that nothing applied is applied again.
local before = read_freed(freed) or { floor = 0, done = '' }
local new_floor, done = record(before, floor, seq, ARGV[4])
if not new_floor then
  -- Applied before, and given back since: nothing to take.
  return {1, 1, 0}
end
local token = 0
if (mode == 'w' or mode == 'f') and fencing == '1' then
  token = redis.call('INCR', fence_key)
end
if kind == 'sem' then
  if state.permits ~= permits then
    redis.call('HSET', lock, '#kind', 'sem ' .. permits)
  end
elseif not state.kind then
  redis.call('HSET', lock, '#kind', kind)
end
if state.waiting[owner] then
  state.waiting[owner] = nil
  redis.call('HDEL', lock, '~' .. owner)
end
put_holder(lock, state, owner, {
  mode = mode, count = 1, ['until'] = now + lease, token = token,
  floor = new_floor, done = done, meta = new_meta(who),
})
settle_shared(lock, state, now)
return {1, 1, token}
