-- release.lua: give back one hold of a lock of any kind; the last one frees it and
-- tells waiters, or hands a plain lock to the releasing client's next waiter.
--
-- Sent after lock.lua (the layout), under `#!lua flags=allow-oom`: a full server
-- must still let locks go.
--
-- One run gives back the holds of several releases, in order (the client sends the
-- releases that are ready at the same moment together, see lock-core/src/batch.rs);
-- each is applied, or not, exactly as if it ran alone.
--
-- KEYS     three or four per release, in order:
--   the lock `<ns>:{name}` (see lock.lua)
--   the release channel `<ns>:{name}:released`, passed as a key so that a cluster
--          routes it with the lock (same hash slot)
--   this owner's final-release record `<ns>:{name}:freed:<owner>`: written by a
--          final release that asks for it, read by its retry
--   the fencing counter `<ns>:{name}:fence`, only when the release has a successor
--          that asks for fencing
-- ARGV[1]  "PUBLISH", or "SPUBLISH" on a cluster
-- ARGV[2]  how long, in ms, the record of a final release lasts, for its retry
-- ARGV     then six per release, for release i ARGV[6i-3 .. 6i+2]:
--   owner id
--   lease in milliseconds to keep at least while holds remain
--   the operation's sequence number (see acquire.lua, "Exactly once")
--   the owner's floor (see acquire.lua)
--   the successor: "" for none, else "<owner> <lease> <seq> <floor> <fencing>
--          <who>", a waiter of the releasing client (lock-core/src/handoff.rs)
--          that takes a plain lock if this release gives back the last hold and
--          nobody else listens on the channel (the releasing client's own
--          subscriber is the one listener): its owner id, its lease in ms, the
--          number of the hand-off among its operations (an acquire), its floor,
--          "1" to be given the next fencing token, and what its client says of it
--          (see lock.lua, `#who:`; may be empty)
--   "1": a final release leaves its record at `<ns>:{name}:freed:<owner>` for
--          its retry; "0": it leaves none (the client can tell an applied final
--          release from a lost one without it, see "Records" below)
--
-- Returns one answer per release, in order:
--   {1, remaining}  one hold given back, or this operation was applied before (a
--                   replay, also of the final release after the lock was freed);
--                   remaining 0 means this owner holds nothing now, and a
--                   message went out on the channel when the lock became free to
--                   others: "<owner>:<seq>" (for a fair lock with waiters, then a
--                   space and the next one's owner id), unique per release, so
--                   that a client hearing one release from several Redlock nodes
--                   wakes one waiter, and a later release is never taken for a
--                   repeat
--   {2, fence}      the last hold given back and the lock handed to the successor,
--                   with fencing token fence (0: none), or this was applied before
--                   and the successor holds the lock; no message
--   {-1}            this owner does not hold the lock, and nothing here says
--                   this release was applied: not applied, or (a final release
--                   sent without its record, retried) applied and not recorded
--   {-8}            this owner does not hold the lock, and its record says this
--                   release was not applied: a force-unlock took its hold (see
--                   force_release.lua), or another release of it was the final one
--   {-2}            the lock holds what distlock did not write (see lock.lua);
--                   left untouched
--   {-6, error}     a command it called was refused (a PUBLISH without channel
--                   permission, say), before it wrote anything; the other
--                   releases of the run are not affected (see lock.lua, `answer`)
--
-- The message is published before the writes, so a user without channel
-- permission changes nothing (and gets {-6, error}).
--
-- Records. A final release deletes the lock, and with it the holder's replay
-- record (`#op:<owner>`); what would tell its retry that it was applied is the
-- final-release record. The client asks for one only when it cannot tell an
-- applied final release from a lost one by what it knows (lock-core/src/release.rs,
-- `Release::read`): a release with a successor, on a cluster (whose connection
-- may send a request again on its own) or on Redlock, or a hold whose lease ends
-- within the time the record would last. Otherwise a "not held" answer to its
-- retry ({-1}) says it was applied: the hold was alive when it was sent, and
-- only this release, the end of the lease (the client's clock says it did not
-- end), a replaced server (the client's links say none was) or a force-unlock
-- (which leaves a record saying so, {-8}) could take it.

-- ARGV[1] and ARGV[2], and the PUBSUB subcommand that counts a channel's
-- listeners: set by `main` on every call.
local publish, remember, numsub

-- Keeps `new_record`, the replay record of an applied final release, at `freed`
-- for its retry, when the release asked for it (`keep`).
local function remember_final(freed, new_record, keep)
  if keep then
    redis.call('SET', freed, new_record, 'PX', remember)
  end
end

-- Whether the only listener on `channel` is one client (the releasing one, whose
-- waiter is the successor): no waiter of another client is told of releases there.
local function alone_on(channel)
  local reply = redis.pcall('PUBSUB', numsub, channel)
  return type(reply) == 'table' and reply[2] == 1
end

-- The last hold of `owner` given back from a lock whose holders have leases of
-- their own (read-write, semaphore, fair): its fields go, and waiters are told when
-- a writer, a permit or a fair lock's holder left, or the last reader.
local function release_last_shared(lock, channel, owner, seq_text)
  local now = now_ms()
  local state = read_all(lock, now)
  if not state then
    return false
  end
  state.holders[owner] = nil
  local reader = state.kind == 'rw' and state.writer ~= owner
  local token_holder = state.writer == owner or state.kind == 'fair'
  local fields = holder_fields(owner, token_holder)
  if token_holder then
    state.writer = nil
  end
  if not reader or not next(state.holders) then
    redis.call(publish, channel, release_message(state, owner, seq_text))
  end
  if occupied(state) then
    -- Others hold or wait: this holder's fields go (else `settle` deletes the key).
    drop(lock, fields)
  end
  settle(lock, state, now)
  return true
end

-- Gives back one hold of `owner` (`me`, as `read_mine` reads it), operation
-- `seq_text` over floor `floor`: the answer when that settles it (a replay or a
-- settled stray copy answers the count as it stands; a hold that is not the last
-- is lowered, its lease kept at least `lease` ms); else nil and the replay record
-- of the final release, which the caller applies.
local function give_back(lock, me, owner, lease, floor, seq_text)
  local new_record = record(me, floor, tonumber(seq_text), seq_text)
  if not new_record then
    -- Applied before (a replay), or settled: a stray copy, applied never again.
    return {1, me.count}
  end
  if me.count > 1 then
    return {1, change_hold(lock, me, owner, '-1', lease, new_record)}
  end
  return nil, new_record
end

-- Frees the plain lock at `lock` by the final release of `owner` (operation
-- `seq_text`, `state` as read): waiters are told, the lock deleted, and the
-- release's replay record `new_record` kept at `freed` for its retry when asked
-- (`keep`). Its answer.
local function free(lock, channel, freed, keep, state, owner, seq_text, new_record)
  redis.call(publish, channel, release_message(state, owner, seq_text))
  redis.call('DEL', lock)
  remember_final(freed, new_record, keep)
  return {1, 0}
end

-- A plain lock's state, for `release_message`.
local PLAIN = { kind = 'lock' }

-- A release of a plain lock that `owner` holds, with no successor (the common
-- case): done as `release` does it, from the owner's fields (`mine_fields`), without
-- making the tables of a lock's state. Its answer; else nil and the fields it read,
-- when the lock is not that (another kind, not held by `owner`, or not as distlock
-- writes it), for `release` to answer from them.
local function release_plain(lock, channel, freed, keep, owner, lease, seq_text, floor_text)
  local v = mine_fields(lock, owner)
  local count = v[4]
  if v[1] ~= 'lock' or v[2] ~= LAYOUT or (v[3] and not is_number(v[3]))
      or not is_number(count) or count == '0' then
    return nil, v
  end
  local floor, done = read_record(v[5])
  if not floor then
    return nil, v
  end
  local me = { count = tonumber(count), floor = floor, done = done }
  local answer_now, new_record = give_back(lock, me, owner, lease, tonumber(floor_text), seq_text)
  if answer_now then
    return answer_now
  end
  return free(lock, channel, freed, keep, PLAIN, owner, seq_text, new_record)
end

-- One release: operation `seq_text` of `owner`, whose floor is `floor_text`;
-- `successor` the waiter it may hand the lock to (nil: none), as parsed below, and
-- `fence` that waiter's fencing counter; `fields`: the owner's fields, read
-- already (`release_plain`), or nil.
local function release(lock, channel, freed, keep, fence, owner, lease, seq_text, floor_text, successor, fields)
  local seq, floor = tonumber(seq_text), tonumber(floor_text)
  local state = read_mine(lock, owner, nil, nil, fields)
  if not state then
    return {-2}
  end
  local me = state.me
  if me and me['until'] and me['until'] <= now_ms() then
    -- Its own lease ended: it holds nothing (the next full read drops its fields).
    me = nil
  end

  if not me then
    -- Not held by this owner: was this release the final one, applied before?
    local before = read_freed(freed)
    if before == NO_RECORD then
      return {-1}
    end
    if not in_done(before.done, seq) then
      return {-8}
    end
    if successor then
      -- The successor's owner id sent nothing of its own while this release was
      -- on its way: holding the lock, it was handed it by this release.
      local now = read_mine(lock, successor.owner)
      if now and now.me then
        return {2, now.token}
      end
    end
    return {1, 0}
  end

  local answer_now, new_record = give_back(lock, me, owner, lease, floor, seq_text)
  if answer_now then
    return answer_now
  end

  if state.kind ~= 'lock' then
    if not release_last_shared(lock, channel, owner, seq_text) then
      return {-2}
    end
    remember_final(freed, new_record, keep)
    return {1, 0}
  end

  if successor and alone_on(channel) then
    local token = 0
    if successor.fencing == '1' then
      token = read_counter(fence)
    end
    if token then
      local next_record = record({ floor = 0, done = '' }, tonumber(successor.floor),
        tonumber(successor.seq), successor.seq)
      if next_record then
        remember_final(freed, new_record, keep)
        redis.call('DEL', lock)
        return {2, take(lock, fence, successor.owner, successor.lease, successor.fencing == '1',
          next_record, successor.who)}
      end
    end
    -- A counter distlock did not write, or a hand-off already settled: free the
    -- lock as always; the waiter's own attempt reports the conflict.
  end

  return free(lock, channel, freed, keep, state, owner, seq_text, new_record)
end

-- The script itself: run once per call (see lock.lua, "Two ways to run").
local function main()
  publish, remember, numsub = ARGV[1], ARGV[2], 'NUMSUB'
  if publish == 'SPUBLISH' then
    numsub = 'SHARDNUMSUB'
  end
  local answers = {}
  local k = 0
  for a = 3, #ARGV, 6 do
    local successor, fence = nil, nil
    local o, l, s, f, fencing, who
    if ARGV[a + 4] ~= '' then
      o, l, s, f, fencing, who = string.match(ARGV[a + 4], '^(%S+) (%d+) (%d+) (%d+) ([01]) ?(.*)$')
    end
    if o then
      successor = { owner = o, lease = l, seq = s, floor = f, fencing = fencing, who = who }
      if fencing == '1' then
        fence = KEYS[k + 4]
      end
    end
    local lock, channel, freed, owner = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], ARGV[a]
    local keep = ARGV[a + 5] == '1'
    local plain, fields = nil, nil
    if not successor then
      plain, fields = answer(release_plain, lock, channel, freed, keep, owner, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3])
    end
    answers[#answers + 1] = plain or answer(release,
      lock, channel, freed, keep, fence, owner, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], successor, fields
    )
    if fence then
      k = k + 4
    else
      k = k + 3
    end
  end
  return answers
end

return main()
