-- renew.lua: extend the leases of locks their owners still hold (the watchdog's
-- call): one run renews every hold of a batch (on a cluster, the holds of one hash
-- slot), so that a thousand held locks cost a few runs per renewal period. On
-- Redlock it also writes a plain lock back on a node that lost it (came back
-- empty, say) while its owner still holds a majority of the others.
--
-- Sent after lock.lua (the layout), under `#!lua flags=allow-oom`: a full server
-- must keep honouring the leases it granted.
--
-- KEYS[i]      the lock `<ns>:{name}` of hold i (see lock.lua)
-- ARGV[4i-3]   its owner id
-- ARGV[4i-2]   its lease in milliseconds; a lease only ever moves later
-- ARGV[4i-1]   "" to renew only; or "<count> <seq> <floor>" to write the hold back
--              when the lock is free here (no key): a plain lock held `count` times
--              by the owner, with the replay record of its operation `seq` (the
--              write-back) and its floor (see acquire.lua, "Exactly once")
-- ARGV[4i]     "" for nothing more; or "<held ms> <who>" to name the holder (see
--              lock.lua, `#who:`), which took the lock that many ms ago, unless it
--              is named already: a hold's first renewal names it
--
-- Returns one answer per hold, in order:
--   1    the owner holds the lock: its lease now lasts at least ARGV[3i-1] ms
--   2    the lock was free here, and was written back (ARGV[3i]): the owner holds
--        it again, for ARGV[3i-1] ms
--   0    the owner does not hold it, and the key is there: another owner holds it
--        (or waits for it), the owner's own lease ended, or KEYS[i] holds what
--        distlock did not write (see lock.lua), which is left untouched
--   -1   the owner does not hold it, and there is no key: its lease ended, it was
--        force-unlocked, or the server lost it (a restart without persistence)
--   {-6, error}  a command it called was refused (see lock.lua, `answer`): the
--        outcome is unknown, and the watchdog tries again
-- To the watchdog 0 and -1 are the loss of the lock (on one server; on Redlock when
-- a majority answers so): it stops renewing it and tells the guard.

-- Writes the hold of `owner` back at the free `lock`, as `spec` ("<count> <seq>
-- <floor>") says, for `lease` ms: 2, or -1 when `spec` is not one or its operation
-- is settled.
local function write_back(lock, owner, lease, spec)
  local count, seq_text, floor = string.match(spec, '^([1-9]%d*) ([1-9]%d*) (%d+)$')
  if not count or #count > 18 or #seq_text > 18 or #floor > 18 then
    return -1
  end
  local record_text = record(NO_RECORD, tonumber(floor), tonumber(seq_text), seq_text)
  if not record_text then
    return -1
  end
  take(lock, nil, owner, lease, false, record_text, nil)
  if count ~= '1' then
    write(lock, { owner, count })
  end
  return 2
end

-- Renews the hold of `owner` at `lock` to at least `lease` ms, or writes it back
-- as `spec` says when the lock is free here and `spec` is not "": 1 or 2, or 0 / -1
-- when it does not hold it (see above).
local function extend(lock, owner, lease, spec)
  local state = read_mine(lock, owner)
  if not state then
    return 0
  end
  local me = state.me
  if not me then
    if state.exists then
      return 0
    end
    if spec ~= '' then
      return write_back(lock, owner, lease, spec)
    end
    return -1
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
  own_lease(lock, owner, math.max(me['until'], now + lease), now, {})
  return 1
end

-- One renewal (see above): `extend`, then, when the owner holds the lock and
-- `name` is "<held ms> <who>", its holder named.
local function renew(lock, owner, lease, spec, name)
  local held = extend(lock, owner, lease, spec)
  if held > 0 and name ~= '' then
    local held_ms, who = string.match(name, '^(%d+) (.+)$')
    if held_ms and #held_ms <= 12 then
      name_holder(lock, owner, tonumber(held_ms), who)
    end
  end
  return held
end

-- The script itself: run once per call (see lock.lua, "Two ways to run").
local function main()
  local answers = {}
  for i = 1, #KEYS do
    local a = 4 * i - 3
    answers[i] = answer(renew, KEYS[i], ARGV[a], ARGV[a + 1], ARGV[a + 2] or '', ARGV[a + 3] or '')
  end
  return answers
end

return main()
