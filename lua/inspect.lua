-- inspect.lua: read the state of a lock without changing it.
--
-- Sent after lock.lua and shared.lua, under `#!lua flags=no-writes`.
--
-- KEYS[1]  the lock `<ns>:{name}` (see lock.lua)
-- KEYS[2]  the fencing counter `<ns>:{name}:fence`
--
-- Returns
--   {0, 0, -2, 0, counter}              free; counter is the last fencing token issued (0: none)
--   {1, hold_count, pttl, token, counter}  held; pttl is the remaining lease in ms (-1: no
--                                       expiry), token the holder's fencing token (0: none)
--   {3, kind, permits, counter, waiting, n, holders...}
--                                       a read-write lock (kind 1), a semaphore
--                                       (kind 2, of `permits` permits) or a fair lock
--                                       (kind 3; see shared.lua): `waiting` waiters
--                                       keep their place, and `n` holders follow,
--                                       four numbers each: mode (1 reader, 2 writer,
--                                       3 permit, 4 a fair lock's holder), hold
--                                       count, lease left in ms, fencing token
--   {-2}                                a key holds a value of another type, or KEYS[1]
--                                       a string that lock.lua's `read` does not accept,
--                                       or KEYS[2] a string that is not a counter (an
--                                       integer, not negative)
-- A held lock's reply then ends with one string per holder, in order: what its
-- client wrote of it (lock.lua's meta) as "<held ms> <at> <who>", how long it has
-- held the lock and since when (server ms), or "" when the holder has none. Owner
-- ids are never returned.

local lock, fence_key = KEYS[1], KEYS[2]

-- A holder's meta ("<at> <who>", its time known) as this script answers it.
local function shown(meta, now)
  local at, who = string.match(meta or '', '^(%d+) (.*)$')
  if not at then
    return ''
  end
  return string.format('%d %s %s', math.max(now - tonumber(at), 0), at, who)
end
local counter = read_counter(fence_key)
if not counter then
  return {-2}
end

local value = redis.pcall('GET', lock)
if type(value) == 'table' then
  local now = now_ms()
  local shared = read_shared(lock, now)
  if not shared or not shared.kind then
    return {-2}
  end
  local kind, permits = 1, 0
  if shared.kind == 'sem' then
    kind, permits = 2, shared.permits
  elseif shared.kind == 'fair' then
    kind = 3
  end
  local waiting = 0
  for _, _ in pairs(shared.waiting) do
    waiting = waiting + 1
  end
  local reply = {3, kind, permits, counter, waiting, 0}
  local modes = { r = 1, w = 2, p = 3, f = 4 }
  local metas = {}
  for _, h in pairs(shared.holders) do
    reply[6] = reply[6] + 1
    reply[#reply + 1] = modes[h.mode]
    reply[#reply + 1] = h.count
    reply[#reply + 1] = h['until'] - now
    reply[#reply + 1] = h.token
    metas[#metas + 1] = shown(h.meta, now)
  end
  for _, meta in ipairs(metas) do
    reply[#reply + 1] = meta
  end
  return reply
end
local state = read(value, nil)
if not state then
  return {-2}
end
if not state.held then
  return {0, 0, -2, 0, counter}
end
return {1, state.total, redis.call('PTTL', lock), state.token, counter, shown(resolve(lock, state.meta), now_ms())}
