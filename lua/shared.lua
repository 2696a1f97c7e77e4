-- shared.lua: how every script reads a lock that several owners may hold at once, a
-- read-write lock or a semaphore. Not a script of its own: the client sends it after
-- lock.lua in front of acquire_shared.lua, release.lua, renew.lua, inspect.lua and
-- force_release.lua, so that all of them read such a lock in one way.
--
-- Such a lock is one hash at the lock's own key `<ns>:{name}` (where a plain lock is
-- a string: each kind finds the other's key of another type, a conflict):
--
--   '#kind'     'rw' (a read-write lock), or 'sem <permits>' (a semaphore)
--   <owner>     a holder: '<mode> <count> <until> <fence> <floor> <done...>'
--               mode  r a reader, w the writer, p a permit of a semaphore
--               count its hold count, 1 or more
--               until when its lease ends, in ms of the server's clock (TIME)
--               fence the fencing token of a writer (0: none; readers and permits
--                     have none)
--               floor, done  its replay record, as for a plain lock (lock.lua)
--   <owner>     a holder's final release: '- <until> <floor> <done...>', its replay
--               record, kept until `until` for the retry of that release
--   '~<owner>'  a writer waiting for the lock: '<until>'. While one lives, no new
--               reader enters, so readers in a loop cannot starve a writer. The
--               waiter renews it with each look (at least every WAITER_LOOK_MS), and
--               it dies WAITER_MS after the last: a writer that went away stops
--               holding readers back within that.
--
-- Leases are times of the server's clock, never of a client's: a holder whose `until`
-- has passed holds nothing, and the first script that reads the hash drops its field.
-- The key expires with the latest `until` of its fields, so a lock whose holders all
-- went away leaves nothing behind.

local WAITER_MS = 3000
local WAITER_LOOK_MS = 1000

-- The server's clock, in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Whether `text` is a number distlock writes: digits, no leading zero, at most 18.
local function number(text)
  return #text <= 18 and (#text == 1 or string.byte(text) ~= 48)
end

-- Reads the hash at `key` at time `now`: nil when `key` holds what distlock did not
-- write (another type, or a field not of a form above). Else a table with `kind`
-- (nil when there is no key), `permits`, `holders` (owner -> { mode, count, until,
-- token, floor, done }, live ones only), `records` (owner -> { until, floor, done }
-- of final releases), `waiting` (owner -> until, live ones), `dead` (the set of
-- fields whose time is up, to drop), and `latest` (the latest `until` of what lives).
local function read_shared(key, now)
  local flat = redis.pcall('HGETALL', key)
  if flat['err'] then
    return nil
  end
  local state = { holders = {}, records = {}, waiting = {}, dead = {}, latest = 0 }
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    if field == '#kind' then
      if value == 'rw' then
        state.kind = 'rw'
      else
        local permits = string.match(value, '^sem ([1-9]%d*)$')
        if not permits or #permits > 9 then
          return nil
        end
        state.kind, state.permits = 'sem', tonumber(permits)
      end
    elseif string.sub(field, 1, 1) == '~' then
      if not string.match(value, '^[1-9]%d*$') or not number(value) then
        return nil
      end
      local until_ms = tonumber(value)
      if until_ms <= now then
        state.dead[field] = true
      else
        state.waiting[string.sub(field, 2)] = until_ms
        state.latest = math.max(state.latest, until_ms)
      end
    elseif string.sub(value, 1, 2) == '- ' then
      local until_text, floor, done = string.match(value, '^%- (%d+) (%d+) ?([%d ]*)$')
      if not until_text or not number(until_text) or not number(floor) then
        return nil
      end
      local until_ms = tonumber(until_text)
      if until_ms <= now then
        state.dead[field] = true
      else
        state.records[field] = { ['until'] = until_ms, floor = tonumber(floor), done = done }
        state.latest = math.max(state.latest, until_ms)
      end
    else
      local mode, count, until_text, token, floor, done =
        string.match(value, '^([rwp]) ([1-9]%d*) (%d+) (%d+) (%d+) ?([%d ]*)$')
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
          token = tonumber(token), floor = tonumber(floor), done = done,
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
  return string.format('%s %d %d %d %s %s', h.mode, h.count, h['until'], h.token, h.floor, h.done)
end

-- Writes holder `owner` (`h`, its floor and done as `record` gives them) to the hash.
local function put_holder(key, state, owner, h)
  state.holders[owner] = h
  state.records[owner] = nil
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
  local alive = next(state.holders) or next(state.records) or next(state.waiting)
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

-- Writes the record of `owner`'s final release, kept `remember` ms for its retry.
local function put_record(key, state, owner, floor, done, now, remember)
  local until_ms = now + remember
  state.holders[owner] = nil
  state.records[owner] = { ['until'] = until_ms, floor = floor, done = done }
  state.dead[owner] = nil
  state.latest = math.max(state.latest, until_ms)
  redis.call('HSET', key, owner, string.format('- %d %s %s', until_ms, floor, done))
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
