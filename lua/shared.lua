-- shared.lua: how every script reads a lock kept in a hash: a read-write lock, a
-- semaphore or a fair lock. Not a script of its own: the client sends it after
-- lock.lua in front of acquire_shared.lua, release.lua, renew.lua, inspect.lua,
-- force_release.lua and withdraw.lua, so that all of them read such a lock in one way.
--
-- Such a lock is one hash at the lock's own key `<ns>:{name}` (where a plain lock is
-- a string: each kind finds the other's key of another type, a conflict):
--
--   '#kind'     'rw' (a read-write lock), 'sem <permits>' (a semaphore) or 'fair'
--   '#next'     a fair lock's next ticket: its waiters are served in ticket order
--   <owner>     a holder: '<mode> <count> <until> <fence> <floor> <done...>'
--               mode  r a reader, w the writer, p a permit of a semaphore, f the
--                     holder of a fair lock
--               count its hold count, 1 or more
--               until when its lease ends, in ms of the server's clock (TIME)
--               fence the fencing token of a writer (0: none; readers and permits
--                     have none)
--               floor, done  its replay record, as for a plain lock (lock.lua)
--               then, optionally, '|<at> <who>': when it took the lock (server ms)
--                     and what its client says of it, as for a plain lock
--   '~<owner>'  a waiter that keeps its place: '<until>' for a writer of a
--               read-write lock (while one lives, no new reader enters, so readers
--               in a loop cannot starve a writer), '<until> <ticket>' for a waiter of
--               a fair lock (the live waiter with the lowest ticket is next). The
--               waiter renews it with each look (at least every WAITER_LOOK_MS), and
--               takes it back when it gives up; it dies WAITER_MS after the last
--               look: a waiter that went away (its process killed) stops holding
--               others back within WAITER_MS + WAITER_LOOK_MS.
--
-- A holder's final release leaves its replay record ('<floor> <done...>') not in the
-- hash, which every script reads whole, but in a key of its own,
-- `<ns>:{name}:freed:<owner>` (the same hash slot), that expires after a short while:
-- the retry of that release reads it there, and an acquisition under that owner id
-- (a replay) carries it over. The client names that key for each request (KEYS[3]).
--
-- Leases are times of the server's clock, never of a client's: a holder whose `until`
-- has passed holds nothing, and the first script that reads the hash drops its field.
-- The key expires with the latest `until` of its fields, so a lock whose holders all
-- went away leaves nothing behind.

local WAITER_MS = 3000
local WAITER_LOOK_MS = 1000

-- Whether `text` is a number distlock writes: digits, no leading zero, at most 18.
local function number(text)
  return #text <= 18 and (#text == 1 or string.byte(text) ~= 48)
end

-- Reads the hash at `key` at time `now`: nil when `key` holds what distlock did not
-- write (another type, or a field not of a form above). Else a table with `kind`
-- (nil when there is no key), `permits`, `next` (a fair lock's next ticket),
-- `holders` (owner -> { mode, count, until, token, floor, done, meta }, live ones
-- only),
-- `waiting` (owner -> { until, ticket }, live ones; ticket 0 for a writer), `dead`
-- (the set of fields whose time is up, to drop), and `latest` (the latest `until` of
-- what lives).
local function read_shared(key, now)
  local flat = redis.pcall('HGETALL', key)
  if flat['err'] then
    return nil
  end
  local state = { holders = {}, waiting = {}, dead = {}, latest = 0 }
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    if field == '#kind' then
      if value == 'rw' or value == 'fair' then
        state.kind = value
      else
        local permits = string.match(value, '^sem ([1-9]%d*)$')
        if not permits or #permits > 9 then
          return nil
        end
        state.kind, state.permits = 'sem', tonumber(permits)
      end
    elseif field == '#next' then
      if not string.match(value, '^[1-9]%d*$') or not number(value) then
        return nil
      end
      state.next = tonumber(value)
    elseif string.sub(field, 1, 1) == '~' then
      local until_text, ticket = string.match(value, '^([1-9]%d*) ?(%d*)$')
      if not until_text or not number(until_text) or not number(ticket) then
        return nil
      end
      local until_ms = tonumber(until_text)
      if until_ms <= now then
        state.dead[field] = true
      else
        state.waiting[string.sub(field, 2)] = { ['until'] = until_ms, ticket = tonumber(ticket) or 0 }
        state.latest = math.max(state.latest, until_ms)
      end
    else
      local meta = nil
      local bar = string.find(value, '|', 1, true)
      if bar then
        value, meta = string.sub(value, 1, bar - 1), string.sub(value, bar + 1)
      end
      local mode, count, until_text, token, floor, done =
        string.match(value, '^([rwpf]) ([1-9]%d*) (%d+) (%d+) (%d+) ?([%d ]*)$')
      if not mode or not number(count) or not number(until_text) or not number(token)
          or not number(floor) then
        return nil
      end
      local until_ms = tonumber(until_text)
      if until_ms <= now then
        state.dead[field] = true
      else
        state.holders[field] = {
          mode = mode, count = tonumber(count), ['until'] = until_ms,
          token = tonumber(token), floor = tonumber(floor), done = done, meta = meta,
        }
        state.latest = math.max(state.latest, until_ms)
      end
    end
  end
  if #flat > 0 and not state.kind then
    return nil
  end
  return state
end

-- The value of a holder's field.
local function encode_holder(h)
  local value = string.format('%s %d %d %d %s %s', h.mode, h.count, h['until'], h.token, h.floor, h.done)
  if h.meta and h.meta ~= '' then
    value = value .. '|' .. h.meta
  end
  return value
end

-- Writes holder `owner` (`h`, its floor and done as `record` gives them) to the hash.
local function put_holder(key, state, owner, h)
  state.holders[owner] = h
  state.dead[owner] = nil
  state.latest = math.max(state.latest, h['until'])
  redis.call('HSET', key, owner, encode_holder(h))
end

-- Drops the fields whose time is up, and sets the key's expiry to the latest `until`
-- of what lives (deletes the key when nothing does). Call it once, after the
-- script's own writes.
local function settle_shared(key, state, now)
  local dead = {}
  for field, _ in pairs(state.dead) do
    dead[#dead + 1] = field
  end
  if #dead > 0 then
    redis.call('HDEL', key, unpack(dead))
    state.dead = {}
  end
  local alive = next(state.holders) or next(state.waiting)
  if not alive then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, math.max(state.latest - now, 1))
  end
end

-- The number of live holders, and the earliest and the latest end of their leases
-- (ms from now), of holders whose mode is `mode` (nil: every mode).
local function holders_of(state, mode, now)
  local n, soonest, latest = 0, nil, 0
  for _, h in pairs(state.holders) do
    if not mode or h.mode == mode then
      n = n + 1
      local left = h['until'] - now
      if not soonest or left < soonest then
        soonest = left
      end
      latest = math.max(latest, left)
    end
  end
  return n, soonest or 0, latest
end

-- Whether a writer other than `owner` waits.
local function writer_waits(state, owner)
  for waiter, _ in pairs(state.waiting) do
    if waiter ~= owner then
      return true
    end
  end
  return false
end

-- The next waiter of a fair lock: the live one with the lowest ticket (nil: none).
local function queue_head(state)
  local head, lowest = nil, nil
  for waiter, place in pairs(state.waiting) do
    if not lowest or place.ticket < lowest then
      head, lowest = waiter, place.ticket
    end
  end
  return head
end

-- Keeps the place of waiter `owner` until WAITER_MS from now: a writer's mark, or a
-- fair lock's ticket (its own, or the next one for a newcomer).
local function keep_place(key, state, owner, now)
  local until_ms = now + WAITER_MS
  local place = state.waiting[owner]
  local value = tostring(until_ms)
  if state.kind == 'fair' then
    local ticket
    if place then
      ticket = place.ticket
    else
      ticket = redis.call('HINCRBY', key, '#next', 1)
    end
    value = until_ms .. ' ' .. ticket
    place = { ticket = ticket }
  end
  place = place or { ticket = 0 }
  place['until'] = until_ms
  state.waiting[owner] = place
  state.dead['~' .. owner] = nil
  state.latest = math.max(state.latest, until_ms)
  redis.call('HSET', key, '~' .. owner, value)
end

-- The message that tells waiters of a release: `<owner>:<seq>` (see release.lua),
-- and for a fair lock with waiters, the next one's owner id after a space, so that
-- only that waiter wakes.
local function release_message(state, owner, seq_text)
  local message = owner .. ':' .. seq_text
  if state.kind == 'fair' then
    local head = queue_head(state)
    if head then
      message = message .. ' ' .. head
    end
  end
  return message
end

-- The replay record of an owner's final release at `key` ('<floor> <done...>'): a
-- table with `floor` and `done`, or nil when there is none (or it is not one).
local function read_freed(key)
  local value = redis.pcall('GET', key)
  if type(value) ~= 'string' then
    return nil
  end
  local floor, done = string.match(value, '^(%d+) ?([%d ]*)$')
  if not floor or not number(floor) then
    return nil
  end
  return { floor = tonumber(floor), done = done }
end

-- Ends the hold of `owner` in the hash at `key`, keeping its replay record at
-- `freed` for `remember` ms, for the retry of its final release.
local function put_record(key, freed, state, owner, floor, done, remember)
  state.holders[owner] = nil
  redis.call('HDEL', key, owner)
  redis.call('SET', freed, floor .. ' ' .. done, 'PX', remember)
end

-- Whether the operation `seq` is in `done` (a replay record's applied numbers).
local function in_done(done, seq)
  for n in string.gmatch(done, '%d+') do
    if tonumber(n) == seq then
      return true
    end
  end
  return false
end
