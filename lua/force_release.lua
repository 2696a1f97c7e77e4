-- force_release.lua: delete a lock whoever holds it, and wake its waiters (operators' tool).
--
-- Sent after lock.lua (the layout), under `#!lua flags=allow-oom`.
--
-- KEYS[1]  the lock `<ns>:{name}` (see lock.lua)
-- KEYS[2]  the release channel `<ns>:{name}:released`
-- ARGV[1]  "PUBLISH", or "SPUBLISH" on a cluster
--
-- Every holder goes at once (and a fair lock's queue, a read-write lock's waiting
-- writers).
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
  redis.call('DEL', lock)
  return 1
end

return main()
