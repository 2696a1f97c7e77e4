-- lock.lua: how every script reads a lock. Not a script of its own: the client sends
-- it in front of acquire.lua, release.lua, renew.lua, inspect.lua and
-- force_release.lua (after their first line), so that all of them read the lock, and
-- judge whether distlock wrote it, in one way.
--
-- A lock is one string key `<ns>:{name}`, with the lease as its expiry:
--
--   "<owner> <count> <fence> <floor> <done...>|<at> <who>"
--
-- owner  the holder's owner id (no spaces); one owner at a time
-- count  its hold count, 1 or more
-- fence  the fencing token issued with the first acquisition (0: none)
-- floor  the holder's floor, and done the numbers of its operations applied above
--        it (space separated): its replay record (see acquire.lua, "Exactly once")
-- at     when the holder took the lock, in ms of the server's clock (TIME); or
--        "?<lease>" when the client wrote the lock itself (below): it was taken
--        `lease - PTTL` ms ago, which the first script that moves the expiry (a
--        re-entry, a release that keeps holds, a renewal) turns into a time
-- who    what the client says of the holder, "<pid> <service> <host> <site>" (the
--        site, a function or a source location, last, as it may hold spaces),
--        bounded by the client; shown by inspect.lua. The part from "|" on is
--        optional: a lock written without it reads the same
--
-- A final release leaves the lock free as a tombstone, "- <owner> <floor> <done...>"
-- (the last holder's replay record), that expires after a short while: a retry of
-- that release reads there that it was applied. The first acquisition of a
-- tombstone moves the record to `<ns>:{name}:freed` (with the time it had left),
-- where the retry looks next.
--
-- A first acquisition without fencing is written by the client itself, with
-- `SET <lock> "<owner> 1 0 <floor> <seq>|?<lease> <who>" NX GET PX <lease>`: the
-- cheapest write that creates a lock, and the one acquire.lua makes (but for `at`).

-- The server's clock, in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Reads a lock's value (a string, or false when the key does not exist): a table
-- with `held` (some owner holds it), `total` (the holder's count), `count`
-- (the count of `owner`; nil when `owner` does not hold it), `token`, `floor` and
-- `done`, `meta` (the holder's "<at> <who>", nil when the lock has none), and for
-- a tombstone `freed` (its record, "<owner> <floor> <done...>"); nil
-- when distlock did not write it (not of a form above, a number with a leading
-- zero, or one of more than 18 digits, which could overflow).
local function read(value, owner)
  if value == false then
    return { held = false, total = 0, token = 0, floor = 0, done = '' }
  end
  local meta = nil
  local bar = string.find(value, '|', 1, true)
  if bar then
    value, meta = string.sub(value, 1, bar - 1), string.sub(value, bar + 1)
  end
  if string.sub(value, 1, 2) == '- ' then
    if not string.match(value, '^%- %S+ %d+ ?[%d ]*$') then
      return nil
    end
    return { held = false, total = 0, token = 0, floor = 0, done = '', freed = string.sub(value, 3) }
  end
  local holder, count, token, floor, done =
    string.match(value, '^(%S+) ([1-9]%d*) (%d+) (%d+) ?([%d ]*)$')
  if not holder or #count > 18 or #token > 18 or #floor > 18
      or (#token > 1 and string.byte(token) == 48) or (#floor > 1 and string.byte(floor) == 48) then
    return nil
  end
  local state = {
    held = true, total = tonumber(count), token = tonumber(token),
    floor = tonumber(floor), done = done, meta = meta,
  }
  if holder == owner then
    state.count = state.total
  end
  return state
end

-- Reads the lock at `key` for `owner`, as `read` does: nil when `key` holds what
-- distlock did not write (another type included).
local function read_lock(key, owner)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    return nil
  end
  return read(value, owner)
end

-- The value of a lock held `count` times by `owner`, with fencing token `token`,
-- the replay record `floor` and `done` (as `record` gives them), and the holder's
-- `meta` ("<at> <who>"; nil or '' for none).
local function encode(owner, count, token, floor, done, meta)
  local value = string.format('%s %d %d %s %s', owner, count, token, floor, done)
  if meta and meta ~= '' then
    value = value .. '|' .. meta
  end
  return value
end

-- A new holder's meta, "<now> <who>" (nil when the client sent no `who`).
local function new_meta(who)
  if not who or who == '' then
    return nil
  end
  return string.format('%d', now_ms()) .. ' ' .. who
end

-- The meta of the lock at `lock` with its time known: a "?<lease>" (a lock the
-- client wrote itself, taken `lease - PTTL` ms ago) becomes that time. Call it
-- before anything moves the lock's expiry.
local function resolve(lock, meta)
  if not meta then
    return nil
  end
  local lease, who = string.match(meta, '^%?(%d+) (.*)$')
  if not lease then
    return meta
  end
  local left = math.max(redis.call('PTTL', lock), 0)
  return string.format('%d', now_ms() - math.max(tonumber(lease) - left, 0)) .. ' ' .. who
end

-- The tombstone a final release of `owner` leaves, with its replay record (as
-- `record` gives it): what `read` takes for a free lock with `freed`.
local function tombstone(owner, floor, done)
  return '- ' .. owner .. ' ' .. floor .. ' ' .. done
end

-- The holder's replay record once its operation `seq` (as the client sent it:
-- `seq_text`) is applied, given the floor the client sent (see acquire.lua, "Exactly
-- once"): the new floor and done, with `seq` added and every number at or below the
-- floor dropped. Nothing when `seq` must not be applied: it was already, or it is
-- settled (at or below the floor).
local function record(state, floor, seq, seq_text)
  floor = math.max(floor, state.floor)
  if seq <= floor then
    return nil
  end
  local kept = {}
  for n in string.gmatch(state.done, '%d+') do
    if tonumber(n) == seq then
      return nil
    end
    if tonumber(n) > floor then
      kept[#kept + 1] = n
    end
  end
  kept[#kept + 1] = seq_text
  return string.format('%d', floor), table.concat(kept, ' ')
end

-- Takes the free lock at `lock` (as `state` read it: no key, or a tombstone, whose
-- record moves to `freed` for the time it had left) for `owner`, held once for
-- `lease` ms, its replay record the operation `seq_text` above `floor_text`; with
-- `fencing`, issues the next token of the counter at `fence_key` (which the caller
-- checked with `read_counter`); `who` is what the client says of the holder.
-- Returns the token, 0 without fencing.
local function take(lock, fence_key, freed, state, owner, lease, fencing, floor_text, seq_text, who)
  local token = 0
  if fencing then
    token = redis.call('INCR', fence_key)
  end
  if state.freed then
    local left = redis.call('PTTL', lock)
    if left > 0 then
      redis.call('SET', freed, state.freed, 'PX', left)
    end
  end
  redis.call('SET', lock, encode(owner, 1, token, floor_text, seq_text, new_meta(who)), 'PX', lease)
  return token
end

-- Adds a hold of `owner`, its operation `seq` (sent as `seq_text`, with `floor`), to
-- the lock at `lock` that it holds (as `state` read it), keeping the lease at least
-- `lease` ms. Returns the count: one more, or as it stands when the operation must
-- not be applied (a replay, or settled: see `record`).
local function add_hold(lock, state, owner, lease, floor, seq, seq_text)
  local new_floor, done = record(state, floor, seq, seq_text)
  if not new_floor then
    return state.count
  end
  local count = state.count + 1
  local meta = resolve(lock, state.meta)
  redis.call('SET', lock, encode(owner, count, state.token, new_floor, done, meta), 'KEEPTTL')
  redis.call('PEXPIRE', lock, lease, 'GT')
  return count
end

-- The fencing counter at `key`: 0 when there is none, nil when the key holds what
-- distlock did not write (another type, or not a counter: an integer of at most 18
-- digits, not negative, no leading zero).
local function read_counter(key)
  local value = redis.pcall('GET', key)
  if value == false then
    return 0
  end
  if type(value) ~= 'string' or not (value == '0' or string.match(value, '^[1-9]%d*$'))
      or #value > 18 then
    return nil
  end
  return tonumber(value)
end

