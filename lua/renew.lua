-- renew.lua: extend the leases of locks their owners still hold (the watchdog's
-- call): one run renews every hold of a batch (on a cluster, the holds of one hash
-- slot), so that a thousand held locks cost a few runs per renewal period.
--
-- Sent after lock.lua (the layout), under `#!lua flags=allow-oom`: a full server
-- must keep honouring the leases it granted.
--
-- KEYS[i]      the lock `<ns>:{name}` of hold i (see lock.lua)
-- ARGV[2i-1]   its owner id
-- ARGV[2i]     its lease in milliseconds; a lease only ever moves later
--
-- Returns one answer per hold, in order: 1 when the owner holds the lock (its lease
-- now lasts at least ARGV[2i] ms), 0 when it does not: the lease ended, the lock was
-- force-unlocked, or KEYS[i] now holds what distlock did not write (see lock.lua),
-- which is left untouched. To the watchdog all three are the loss of the lock: it
-- stops renewing it and tells the guard. `{-6, error}` when a command it called was
-- refused (see lock.lua, `answer`): the outcome is unknown, and the watchdog tries
-- again.

-- Renews the hold of `owner` at `lock` to at least `lease` ms: 1, or 0 when it does
-- not hold it.
local function renew(lock, owner, lease)
  local state = read_mine(lock, owner)
  local me = state and state.me
  if not me then
    return 0
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
  local until_ms = math.max(me['until'], now + lease)
  redis.call('HSET', lock, UNTIL .. owner, until_ms)
  redis.call('PEXPIRE', lock, until_ms - now, 'GT')
  return 1
end

-- The script itself: run once per call (see lock.lua, "Two ways to run").
local function main()
  local answers = {}
  for i = 1, #KEYS do
    answers[i] = answer(renew, KEYS[i], ARGV[2 * i - 1], tonumber(ARGV[2 * i]))
  end
  return answers
end

return main()
