-- force_release.lua: delete a lock whoever holds it, and wake its waiters (operators' tool).
--
-- Sent after lock.lua (the layout), under `#!lua flags=allow-oom`.
--
-- KEYS[1]  the lock `<ns>:{name}` (see lock.lua)
-- KEYS[2]  the release channel `<ns>:{name}:released`
-- KEYS[3]  the start of its holders' final-release records, `<ns>:{name}:freed:`
--          (each holder's is this and its owner id: same hash slot)
-- ARGV[1]  "PUBLISH", or "SPUBLISH" on a cluster
--
-- Every holder goes at once (and a fair lock's queue, a read-write lock's waiting
-- writers). Each holder is left a final-release record that says none of its
-- releases in doubt was applied (its replay record as it stood), for as long as its
-- lease would have lasted: so a retry of a release sent without a record of its own
-- is told {-8}, not taken for applied (see release.lua, "Records").
--
-- Returns 1 when a lock was deleted, 0 when nobody held it, -2 when KEYS[1] holds
-- what distlock did not write (see lock.lua), left untouched.

-- The script itself: run once per call (see lock.lua, "Two ways to run").
local function main()
  local lock, channel, publish = KEYS[1], KEYS[2], ARGV[1]

  local state = read_all(lock, now_ms())
  if not state then
    return -2
  end
  if not next(state.holders) then
    return 0
  end
  redis.call(publish, channel, 'released')
  local now, pttl = now_ms(), redis.call('PTTL', lock)
  for owner, h in pairs(state.holders) do
    local left = pttl
    if h['until'] then
      left = h['until'] - now
    end
    if left > 0 then
      redis.call('SET', KEYS[3] .. owner, string.format('%d %s', h.floor, h.done), 'PX', left)
    end
  end
  redis.call('DEL', lock)
  return 1
end

return main()
