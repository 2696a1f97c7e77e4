-- withdraw.lua: a waiter that gives up (its wait ran out, its request was dropped)
-- takes back the place it kept (see shared.lua), and wakes whoever that place held
-- back.
--
-- Sent after lock.lua and shared.lua, under `#!lua flags=allow-oom`: it only ever
-- removes a field.
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

local lock, channel, publish, owner = KEYS[1], KEYS[2], ARGV[1], ARGV[2]

local now = now_ms()
local state = read_shared(lock, now)
if not state or not state.kind or not state.waiting[owner] then
  return 0
end
state.waiting[owner] = nil
local free = not next(state.holders)
if state.kind == 'rw' then
  local writers = holders_of(state, 'w', now)
  free = writers == 0 and not writer_waits(state, nil)
end
if free then
  redis.call(publish, channel, release_message(state, owner, '-'))
end
redis.call('HDEL', lock, '~' .. owner)
settle_shared(lock, state, now)
return 1
