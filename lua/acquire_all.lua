-- acquire_all.lua: take every lock of a set, or none.
--
-- Sent after lock.lua (the layout), under `#!lua`: a set that creates a lock adds
-- data, and is refused as a whole on a server over `maxmemory` with `noeviction`.
-- The client sends it when every key of the set is on one endpoint (one server,
-- Sentinel's master, or one cluster slot); each lock is a plain lock, written as
-- acquire.lua writes one, so that a set and a plain acquisition of one of its
-- names exclude each other.
--
-- KEYS     three per name, for name i (from 1) KEYS[3i-2 .. 3i], in the client's
--          canonical order:
--   the lock `<ns>:{name}` (see lock.lua)
--   the fencing counter `<ns>:{name}:fence`; read and written only when ARGV[1] is
--          "1" and this call takes the lock
--   the final-release record of the name's owner, `<ns>:{name}:freed:<owner>`
--          (see acquire.lua)
-- ARGV[1]  "1": issue a fencing token for each lock this call takes; "0": do not
-- ARGV     then five per name, for name i ARGV[5i-3 .. 5i+1]:
--   owner id: the set's own for a name the caller does not hold, the caller's hold's
--          for one it holds (a re-entry)
--   lease in milliseconds, validated by the client (a re-entry only ever lengthens
--          the lock's lease)
--   the operation's sequence number among that owner's operations (see
--          acquire.lua, "Exactly once")
--   that owner's floor
--   "1": a re-entry (the caller believes it holds the lock: never taken here);
--          "0": a new acquisition
-- ARGV     last, what the client says of the holder, "<pid> <service> <host>
--          <site>", kept with every lock this call takes (see lock.lua, `#who:`);
--          may be absent
--
-- Returns
--   {1, count_1, fence_1, count_2, fence_2, ...}  every lock taken or re-entered
--                  (or this operation was applied before: a replay), with the hold
--                  count and fencing token (0: none) of each, in order
--   {0, i, pttl}   name i is held by another owner (pttl: its remaining lease in
--                  ms, -1 without expiry); nothing was written
--   {-1, i}        name i was to be re-entered, but its owner no longer holds it;
--                  nothing was written
--   {-2, i}        a key of name i holds what distlock did not write (see
--                  lock.lua); nothing was written
--   {-5, i, kind, permits}
--                  name i is held as another kind of lock (see acquire.lua);
--                  nothing was written
--   {-7, i, count} name i was to be newly taken, but the set's owner id holds it
--                  already, `count` times, and this operation was not applied
--                  before: a hold the client does not know of, never added to
--                  (see acquire.lua, "Never added to"); nothing was written
--
-- Every check, for every name, comes before the first write: a Lua error does not
-- roll back, and a set is taken whole or not at all.

-- The script itself: run once per call (see lock.lua, "Two ways to run").
local function main()
  local fencing = ARGV[1] == '1'
  local names = #KEYS / 3
  local who = ARGV[5 * names + 2]

  -- The keys and arguments of name i.
  local function name(i)
    local k, a = 3 * (i - 1), 5 * (i - 1) + 1
    return KEYS[k + 1], KEYS[k + 2], KEYS[k + 3],
      ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5] == '1'
  end

  local states = {}
  for i = 1, names do
    local lock, fence_key, freed, owner, _, seq_text, floor_text, reentry = name(i)
    local state = read_mine(lock, owner, not reentry and freed)
    if not state then
      return {-2, i}
    end
    if state.kind and state.kind ~= 'lock' then
      local other = state.whole or read_all(lock, now_ms())
      if not other then
        return {-2, i}
      end
      if occupied(other) then
        return {-5, i, KINDS[other.kind], permits_in_force(other) or other.permits or 0}
      end
      state = { exists = false, stale = true, token = 0 }
    end
    if reentry then
      if not state.me then
        return {-1, i}
      end
    elseif state.me and record(state.me, tonumber(floor_text), tonumber(seq_text), seq_text) then
      return {-7, i, state.me.count}
    elseif state.exists and not state.me then
      -- Held by another owner (`read_mine` checked every field of the hash).
      return {0, i, redis.call('PTTL', lock)}
    end
    if not state.me then
      if fencing and not read_counter(fence_key) then
        return {-2, i}
      end
      state.record = record(state.never_freed or read_freed(freed), tonumber(floor_text), tonumber(seq_text), seq_text)
    end
    states[i] = state
  end

  local answer = {1}
  for i = 1, names do
    local lock, fence_key, _, owner, lease, seq_text, floor_text = name(i)
    local state = states[i]
    if state.me then
      -- A re-entry; a replay, or a settled stray copy, answers the count as it stands.
      answer[#answer + 1] = add_hold(lock, state.me, owner, lease, tonumber(floor_text), tonumber(seq_text), seq_text)
      answer[#answer + 1] = state.token
    elseif not state.record then
      -- Applied before, and given back since: nothing to take.
      answer[#answer + 1] = 1
      answer[#answer + 1] = 0
    else
      if state.stale then
        redis.call('DEL', lock)
      end
      answer[#answer + 1] = 1
      answer[#answer + 1] = take(lock, fence_key, owner, lease, fencing, state.record, who)
    end
  end
  return answer
end

return main()
