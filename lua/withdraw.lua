-- withdraw.lua: a waiter that gives up (its wait ran out, its request was dropped)
-- takes back the place it kept (see lock.lua, `#wait:`), and wakes whoever that
-- place held back.
--
-- Sent after lock.lua (the layout), under `#!lua flags=allow-oom`: it only ever
-- removes fields.
--
-- KEYS[1]  the lock `<ns>:{name}`
-- KEYS[2]  the release channel `<ns>:{name}:released`
-- ARGV[1]  "PUBLISH", or "SPUBLISH" on a cluster
-- ARGV[2]  the waiter's owner id
--
-- Returns 1 when the place was taken back, 0 when there was none (it was taken, had
-- died, or the key is not such a lock; nothing is written then).
--
-- When the lock is free, or a read-write lock has no writer and no other writer
-- waits, a message goes out ("<owner>:-", and for a fair lock the next waiter's
-- owner id after a space), so that the readers or the next fair waiter it held
-- back look at once instead of at their next look.

-- The script itself: run once per call (see lock.lua, "Two ways to run").
local function main()
  local lock, channel, publish, owner = KEYS[1], KEYS[2], ARGV[1], ARGV[2]

  local now = now_ms()
  local state = read_all(lock, now)
  if not state or not state.kind or not state.waiting[owner] then
    return 0
  end
  state.waiting[owner] = nil
  local free = not next(state.holders)
  if state.kind == 'rw' then
    free = not (state.writer and state.holders[state.writer]) and not next(state.waiting)
  end
  if free then
    redis.call(publish, channel, release_message(state, owner, '-'))
  end
  drop(lock, place_fields(owner))
  settle(lock, state, now)
  return 1
end

return main()
