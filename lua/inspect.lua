-- inspect.lua: read the state of a lock without changing it.
--
-- Sent after lock.lua (the layout), under `#!lua flags=no-writes`.
--
-- KEYS[1]  the lock `<ns>:{name}` (see lock.lua)
-- KEYS[2]  the fencing counter `<ns>:{name}:fence`
-- KEYS[3]  the release channel `<ns>:{name}:released`
-- ARGV[1]  the PUBSUB subcommand that counts the channel's subscribers: `NUMSUB`,
--          or `SHARDNUMSUB` on a cluster (whose waiters use SSUBSCRIBE)
--
-- Returns
--   {0, 0, -2, 0, counter, listening}
--                            nobody holds it; counter is the last fencing token
--                            issued (0: none); `listening` connections are
--                            subscribed to the release channel (one per client
--                            with tasks waiting for the lock, and one per
--                            `distlock watch`), -1 when PUBSUB was refused
--   {3, kind, permits, counter, waiting, listening, n, holders...}
--                            held: a plain lock (kind 0), a read-write lock
--                            (kind 1), a semaphore (kind 2, of `permits` permits:
--                            the count in force, lock.lua's `permits_in_force`)
--                            or a fair lock (kind 3); `waiting` waiters keep their
--                            place (writers, a fair lock's queue), `listening` as
--                            above, and `n` holders follow, four numbers each:
--                            mode (0 the plain lock's holder, 1 reader, 2 writer,
--                            3 permit, 4 a fair lock's holder), hold count, lease
--                            left in ms (-1: no expiry), fencing token (0: none)
--   {-2}                     KEYS[1] holds what distlock did not write (see
--                            lock.lua), or KEYS[2] a value that is not a counter
-- A held lock's reply then ends with one string per holder, in order: what its
-- client said of it (lock.lua's `#who:`) as "<held ms> <at> <who>", how long it
-- has held the lock and since when (server ms), or "" when its client said
-- nothing. Owner ids are never returned.

-- How many connections are subscribed to `channel`, by the PUBSUB subcommand
-- `numsub`; -1 when the server refused it (an ACL without `pubsub|numsub`).
local function listening_on(channel, numsub)
  local reply = redis.pcall('PUBSUB', numsub, channel)
  if type(reply) == 'table' and type(reply[2]) == 'number' then
    return reply[2]
  end
  return -1
end

-- The script itself: run once per call (see lock.lua, "Two ways to run").
local function main()
  local lock, fence_key = KEYS[1], KEYS[2]
  local listening = listening_on(KEYS[3], ARGV[1])

  local counter = read_counter(fence_key)
  if not counter then
    return {-2}
  end
  local now = now_ms()
  local state = read_all(lock, now)
  if not state then
    return {-2}
  end
  if not next(state.holders) then
    return {0, 0, -2, 0, counter, listening}
  end
  local waiting = 0
  for _, _ in pairs(state.waiting) do
    waiting = waiting + 1
  end
  local permits = permits_in_force(state) or state.permits or 0
  local reply = {3, KINDS[state.kind], permits, counter, waiting, listening, 0}
  local pttl = redis.call('PTTL', lock)
  local texts = {}
  for owner, h in pairs(state.holders) do
    local mode, left, token = 0, pttl, 0
    if state.kind == 'rw' then
      mode = 1
      if state.writer == owner then
        mode, token = 2, state.token
      end
    elseif state.kind == 'semaphore' then
      mode = 3
    elseif state.kind == 'fair' then
      mode, token = 4, state.token
    else
      token = state.token
    end
    if h['until'] then
      left = h['until'] - now
    end
    reply[7] = reply[7] + 1
    reply[#reply + 1] = mode
    reply[#reply + 1] = h.count
    reply[#reply + 1] = left
    reply[#reply + 1] = token
    local at, who = string.match(h.who or '', '^(%d+) (.*)$')
    if at then
      texts[#texts + 1] = string.format('%d %s %s', math.max(now - tonumber(at), 0), at, who)
    else
      texts[#texts + 1] = ''
    end
  end
  for _, text in ipairs(texts) do
    reply[#reply + 1] = text
  end
  return reply
end

return main()
