-- acquire.lua: take a lock of any kind (plain, a read or write hold of a read-write
-- lock, a permit of a semaphore, a fair lock), or re-enter one the caller holds.
--
-- The client sends this text after lock.lua (the layout, and how every script
-- reads a lock), under one of two first lines: `#!lua` for a new acquisition
-- (refused as a whole on a server over `maxmemory` with `noeviction`: a new lock
-- adds data) and `#!lua flags=allow-oom` for a re-entry, which only ever raises the
-- count of a lock that exists, so that a full server still lets a holder re-enter.
--
-- One run takes one acquisition or several (the client sends the new acquisitions
-- that are ready at the same moment together, see lock-core/src/batch.rs); each is
-- answered exactly as if it ran alone, in order.
--
-- KEYS     three per acquisition, for acquisition i KEYS[3i-2 .. 3i]:
--   the lock `<ns>:{name}` (see lock.lua)
--   the fencing counter `<ns>:{name}:fence`; read and written only when its
--          fencing argument is "1" and this call takes the lock
--   this owner's final-release record `<ns>:{name}:freed:<owner>`: looked for by
--          a new acquisition (one EXISTS with the lock: when neither is there,
--          nothing else is read) and read when this call would take the lock, so
--          that a stray copy of an operation that was applied and given back since
--          is not applied again
-- ARGV     ten per acquisition, for acquisition i ARGV[10i-9 .. 10i], numbered
--          here as for the first:
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds, validated by the client (10 ..= the documented
--          maximum); passed on to Redis as sent (no number formatted again)
-- ARGV[3]  "1": issue a fencing token when this call takes a plain lock, a write
--          hold or a fair lock; "0": do not
-- ARGV[4]  the operation's sequence number: 1, 2, 3, ... per owner id, one per
--          acquire, re-entry or release of that owner (a retry keeps its number)
-- ARGV[5]  the owner's floor: every operation of this owner numbered at or below it
--          is settled (its outcome is known to the client, or given up), so it is
--          never applied from now on
-- ARGV[6]  "1": the caller believes it holds the lock already (a re-entry), so the
--          lock is never taken here; "0": an ordinary acquire
-- ARGV[7]  what to take: "x" a plain lock, "r" a read hold, "w" the write hold,
--          "p<permits>" a permit of a semaphore of that many permits, "f" a fair lock
-- ARGV[8]  for a read hold, the owner id of the write hold that the caller's call
--          chain holds (a downgrade: the reader enters beside its own writer), or ""
-- ARGV[9]  "1": the caller waits if it cannot take it now, so a writer or a fair
--          waiter keeps its place (see lock.lua, `#wait:`); "0": it gives up at
--          once (a `try`), and keeps none
-- ARGV[10] what the client says of the holder, "<pid> <service> <host> <site>", kept
--          with a new hold (see lock.lua, `#who:`); "" for nothing
--
-- Returns one answer per acquisition, in order:
--   {1, hold_count, fence}  taken or re-entered, or this operation was applied before
--                           (a replay); fence is the fencing token (0: none)
--   {0, pttl}               not now: look again within pttl ms (the holder's
--                           lease; -1 when the lock has no expiry; at most
--                           WAITER_LOOK_MS for a waiter that keeps its place, so
--                           that its place stays alive)
--   {-1}                    re-entry asked, but this owner no longer holds the lock
--   {-2}                    KEYS[1] or KEYS[2] holds what distlock did not write
--                           (see lock.lua); both untouched
--   {-3}                    the owner holds the read-write lock as a reader and
--                           asked for the write hold (an upgrade, refused)
--   {-5, kind, permits}     the name is held (or waited for) as another kind of
--                           lock: kind 0 plain, 1 read-write, 2 semaphore (of
--                           `permits` permits; 0 for the other kinds), 3 fair
--   {-6, error}             a command it called was refused (see lock.lua,
--                           `answer`); the others of the run are not affected
--   {-7, hold_count}        a new acquisition (not a re-entry) found its own owner
--                           id holding the lock already, `hold_count` times, and
--                           this operation not applied before: a hold its client
--                           does not know of (see "Never added to" below); nothing
--                           was written
--
-- A plain lock has one holder. A read hold enters unless a writer holds the lock,
-- or one waits (a downgrade enters beside its own writer). The write hold is taken
-- when nobody holds the lock; a writer that waits keeps its place, which stops new
-- readers. A permit is taken while fewer owners hold one than both `permits` and
-- the count in force (the smallest any holder asked for: lock.lua's
-- `permits_in_force`); a semaphore with no holder takes the permit count of this
-- acquisition, and a holder that asks for another count keeps it beside its hold. A fair lock
-- is taken when nobody holds it and no live waiter came before (the lowest ticket
-- is next); a waiter keeps its place (its ticket) for as long as it keeps looking.
--
-- Exactly once. A reply can be lost and the operation retried or replayed (by the
-- client, or by a cluster connection on its own), and operations of one owner can
-- overlap (`join!` branches re-entering, a dropped guard's background release). So
-- every operation carries its owner's sequence number, and the lock keeps, for each
-- holder, the numbers applied above the holder's floor (done) and the floor itself
-- (the highest ever sent), in `#op:<owner>`. An operation is applied only if its
-- number is above the floor and not in done; then its number joins done, and
-- numbers at or below the new floor leave it. Each number is thus applied at most
-- once, whatever the order of arrivals. The record stays small: the client raises
-- the floor as outcomes become known, so done holds only the operations still in
-- doubt. A final release moves the record to `<ns>:{name}:freed:<owner>` for a
-- short while (see release.lua), where a retry, or a late copy of an acquisition,
-- finds it.
--
-- Never added to. Only a re-entry adds to a hold: its client has a guard that
-- owns the hold, and asks for one more. A new acquisition comes under an owner id
-- its client believes holds nothing; finding that id holding (a hold the client
-- lost track of: a hand-off whose answer could not be read, say) it must not add
-- to it, since no guard could own the sum: it is answered {-7, count} and
-- changes nothing. Its client gives that hold back and asks again under a fresh
-- owner id (lock-core/src/acquire/wait.rs). A replay of an acquisition that was
-- applied (its number in the record) answers the count as it stands, as always.
--
-- Every check comes before the first write: a Lua error does not roll back.

-- One acquisition's arguments, from ARGV[a]: a table.
local function request(a)
  local want = ARGV[a + 6]
  local r = {
    owner = ARGV[a], lease = ARGV[a + 1], fencing = ARGV[a + 2] == '1',
    seq_text = ARGV[a + 3], seq = tonumber(ARGV[a + 3]), floor = tonumber(ARGV[a + 4]),
    reentry = ARGV[a + 5] == '1', mode = string.sub(want, 1, 1), kind = 'lock',
    parent = ARGV[a + 7], stays = ARGV[a + 8] == '1', who = ARGV[a + 9],
  }
  if r.mode == 'r' or r.mode == 'w' then
    r.kind = 'rw'
  elseif r.mode == 'p' then
    r.kind, r.permits = 'semaphore', tonumber(string.sub(want, 2))
  elseif r.mode == 'f' then
    r.kind = 'fair'
  end
  return r
end

-- A new acquisition of a plain lock (not a re-entry) from ARGV[a] on, when neither
-- the lock nor its owner's final-release record is there (one EXISTS; the common
-- case, every new acquisition having a fresh owner id): taken as `acquire_plain`
-- takes a free lock, without making the tables of a request and of a lock's
-- state, since a call's garbage costs the server a share of the collector's walk
-- over the whole library. Its answer, or nil when either key is there.
local function take_free_plain(lock, fence_key, freed, a)
  if redis.call('EXISTS', lock, freed) ~= 0 then
    return nil
  end
  local fencing = ARGV[a + 2] == '1'
  if fencing and not read_counter(fence_key) then
    return {-2}
  end
  local seq_text = ARGV[a + 3]
  local new_record = record(NO_RECORD, tonumber(ARGV[a + 4]), tonumber(seq_text), seq_text)
  if not new_record then
    -- Settled before it arrived (at or below the floor): nothing to take.
    return {1, 1, 0}
  end
  return {1, 1, take(lock, fence_key, ARGV[a], ARGV[a + 1], fencing, new_record, ARGV[a + 9])}
end

-- A plain lock: its holder alone is read. `present`: a new acquisition that found
-- the lock or its owner's final-release record there (`take_free_plain`).
local function acquire_plain(lock, fence_key, freed, r, present)
  local state = read_mine(lock, r.owner, not r.reentry and freed, present)
  if not state then
    return {-2}
  end
  if state.kind and state.kind ~= 'lock' then
    local other = state.whole or read_all(lock, now_ms())
    if not other then
      return {-2}
    end
    if occupied(other) then
      return {-5, KINDS[other.kind], permits_in_force(other) or other.permits or 0}
    end
    state = { exists = false, stale = true, token = 0 }
  end
  if state.me then
    if not r.reentry and record(state.me, r.floor, r.seq, r.seq_text) then
      return {-7, state.me.count}
    end
    -- A re-entry; a replay, or a settled stray copy, answers the count as it stands.
    return {1, add_hold(lock, state.me, r.owner, r.lease, r.floor, r.seq, r.seq_text), state.token}
  end
  if r.reentry then
    return {-1}
  end
  if state.exists then
    -- Held by another owner (`read_mine` checked every field of the hash).
    return {0, redis.call('PTTL', lock)}
  end
  if r.fencing and not read_counter(fence_key) then
    return {-2}
  end
  local new_record = record(state.never_freed or read_freed(freed), r.floor, r.seq, r.seq_text)
  if not new_record then
    -- Applied before, and given back since: nothing to take.
    return {1, 1, 0}
  end
  if state.stale then
    redis.call('DEL', lock)
  end
  return {1, 1, take(lock, fence_key, r.owner, r.lease, r.fencing, new_record, r.who)}
end

-- The number of live holders of `state`, and the earliest and the latest end of
-- their leases (ms after `now`).
local function holders(state, now)
  local n, soonest, latest = 0, nil, 0
  for _, h in pairs(state.holders) do
    n = n + 1
    local left = h['until'] - now
    if not soonest or left < soonest then
      soonest = left
    end
    latest = math.max(latest, left)
  end
  return n, soonest or 0, latest
end

-- How long `r` must wait, when it may not take the lock (as `state` is) now, and
-- whether it keeps a place meanwhile; nil when it may take it.
local function must_wait(state, r, now)
  local held, soonest, latest = holders(state, now)
  if r.mode == 'w' then
    if held > 0 then
      return math.min(latest, WAITER_LOOK_MS), true
    end
  elseif r.mode == 'r' then
    local writer = state.writer and state.holders[state.writer]
    local own_writer = writer and r.parent ~= '' and state.writer == r.parent
    if writer and not own_writer then
      return writer['until'] - now, false
    end
    if not own_writer then
      for waiter, _ in pairs(state.waiting) do
        if waiter ~= r.owner then
          return WAITER_LOOK_MS, false
        end
      end
    end
  elseif r.mode == 'p' then
    if held >= math.min(r.permits, permits_in_force(state) or r.permits) then
      return soonest, false
    end
  else
    local head = queue_head(state)
    if held > 0 then
      return math.min(latest, WAITER_LOOK_MS), true
    end
    if head and head ~= r.owner then
      return WAITER_LOOK_MS, true
    end
  end
  return nil, false
end

-- Keeps (or renews) the place of waiter `r` until WAITER_MS from `now`.
local function keep_place(lock, state, r, now)
  local until_ms = now + WAITER_MS
  local fields = {}
  if not state.exists then
    fields = new_lock(r.kind)
  end
  put(fields, WAIT .. r.owner, until_ms)
  local place = state.waiting[r.owner] or { ticket = 0 }
  if r.kind == 'fair' and place.ticket == 0 then
    place.ticket = next_ticket(lock)
    put(fields, TICKET .. r.owner, place.ticket)
  end
  write(lock, fields)
  place['until'] = until_ms
  state.waiting[r.owner] = place
  state.dead[r.owner] = nil
  state.latest = math.max(state.latest, until_ms)
end

-- Takes the lock (as `state` is) for `r`, a new holder with a lease of its own.
local function take_shared(lock, fence_key, state, r, new_record, now)
  local fields = {}
  if not state.exists then
    fields = new_lock(r.kind)
  end
  local token = 0
  if (r.mode == 'w' or r.mode == 'f') and r.fencing then
    token = next_token(fence_key)
    new_token(fields, token)
  end
  if r.mode == 'w' then
    put(fields, FIELD.writer, r.owner)
    state.writer = r.owner
  end
  if r.kind == 'semaphore' and not next(state.holders) then
    -- The first holder sets the semaphore's count.
    if state.permits ~= r.permits then
      put(fields, FIELD.permits, r.permits)
    end
  elseif r.kind == 'semaphore' and state.permits ~= r.permits then
    put(fields, PERMITS .. r.owner, r.permits)
  end
  local until_ms = now + r.lease
  put(fields, UNTIL .. r.owner, until_ms)
  if state.waiting[r.owner] then
    state.waiting[r.owner] = nil
    drop(lock, place_fields(r.owner))
  end
  write(lock, new_holder(fields, r.owner, new_record, r.who))
  state.holders[r.owner] = { count = 1, ['until'] = until_ms }
  state.dead[r.owner] = nil
  state.latest = math.max(state.latest, until_ms)
  settle(lock, state, now)
  return token
end

-- The other kinds: the whole hash is read, for every holder's lease and place.
local function acquire_shared(lock, fence_key, freed, r)
  local now = now_ms()
  local state
  if r.reentry then
    state = read_all(lock, now)
  else
    state = read_new(lock, freed)
  end
  if not state or (r.fencing and not read_counter(fence_key)) then
    return {-2}
  end
  if state.kind and state.kind ~= r.kind then
    if occupied(state) then
      return {-5, KINDS[state.kind], permits_in_force(state) or state.permits or 0}
    end
    -- Left by another kind, its holders and waiters gone: start afresh.
    redis.call('DEL', lock)
    state = free_state()
  end
  local me = state.holders[r.owner]
  if me then
    if not r.reentry and record(me, r.floor, r.seq, r.seq_text) then
      return {-7, me.count}
    end
    if r.kind == 'rw' and r.mode == 'w' and state.writer ~= r.owner then
      return {-3}
    end
    local count = add_hold(lock, me, r.owner, r.lease, r.floor, r.seq, r.seq_text)
    if next(state.dead) then
      state.latest = math.max(state.latest, now + r.lease)
      settle(lock, state, now)
    end
    local token = 0
    if state.writer == r.owner or r.kind == 'fair' then
      token = state.token
    end
    return {1, count, token}
  end
  if r.reentry then
    return {-1}
  end
  local wait_ms, keeps = must_wait(state, r, now)
  if wait_ms then
    if keeps and r.stays then
      keep_place(lock, state, r, now)
    end
    if next(state.dead) or (keeps and r.stays) then
      settle(lock, state, now)
    end
    return {0, wait_ms}
  end
  local new_record = record(state.never_freed or read_freed(freed), r.floor, r.seq, r.seq_text)
  if not new_record then
    -- Applied before, and given back since: nothing to take.
    return {1, 1, 0}
  end
  return {1, 1, take_shared(lock, fence_key, state, r, new_record, now)}
end

-- The script itself: run once per call (see lock.lua, "Two ways to run").
local function main()
  local answers = {}
  for i = 1, #KEYS / 3 do
    local a = 10 * (i - 1) + 1
    local lock, fence_key, freed = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
    local new_plain = ARGV[a + 6] == 'x' and ARGV[a + 5] == '0'
    local free = new_plain and answer(take_free_plain, lock, fence_key, freed, a)
    local r = not free and request(a)
    if free then
      answers[i] = free
    elseif r.kind == 'lock' then
      answers[i] = answer(acquire_plain, lock, fence_key, freed, r, new_plain)
    else
      answers[i] = answer(acquire_shared, lock, fence_key, freed, r)
    end
  end
  return answers
end

return main()
