-- hash.lua: how every script reads a lock hash. Not a script of its own: the client
-- sends it in front of acquire.lua, release.lua, renew.lua and inspect.lua (after
-- their first line), so that the four read the hash, and judge whether distlock
-- wrote it, in one way.

-- Whether `value` is an integer as distlock writes one: decimal, no sign but `-`, no
-- leading zero, no spaces, at most 18 digits (so that it never overflows).
local function integer(value)
  local digits = string.match(value, '^%-?([1-9]%d*)$')
  return value == '0' or (digits ~= nil and #digits <= 18)
end

-- Reads a lock hash from the reply of HGETALL: nil when distlock did not write it (a
-- count, `#fence` or `#floor` that is not an integer, a `#done` that is not a list of
-- numbers, or metadata with no owner); else a table with `held` (some owner holds
-- it), `count` (the hold count of `owner`; nil when `owner` does not hold it),
-- `total` (the holder's count), `token`, `floor` and `done`. Other `#` fields are
-- left alone.
local function read(fields, owner)
  local state = { held = false, total = 0, token = 0, floor = 0, done = '' }
  for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    if field == '#done' then
      if not string.match(value, '^[%d ]*$') then
        return nil
      end
      state.done = value
    elseif field == '#fence' or field == '#floor' or string.sub(field, 1, 1) ~= '#' then
      if not integer(value) then
        return nil
      end
      if field == '#fence' then
        state.token = tonumber(value)
      elseif field == '#floor' then
        state.floor = tonumber(value)
      else
        state.held = true
        state.total = state.total + tonumber(value)
        if field == owner then
          state.count = tonumber(value)
        end
      end
    end
  end
  if #fields > 0 and not state.held then
    return nil
  end
  return state
end

-- Reads the lock hash at `key` for `owner`, as `read` does: nil when `key` holds
-- what distlock did not write (another type included).
local function read_lock(key, owner)
  local fields = redis.pcall('HGETALL', key)
  if fields['err'] then
    return nil
  end
  return read(fields, owner)
end

-- The holder's replay record once its operation `seq` (as the client sent it:
-- `seq_text`) is applied, given the floor the client sent (see acquire.lua, "Exactly
-- once"): the new floor and `#done`, with `seq` added and every number at or below
-- the floor dropped. Nothing when `seq` must not be applied: it was already, or it is
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

-- The fencing counter at `key`: 0 when there is none, nil when the key holds what
-- distlock did not write (another type, or not a counter: an integer, not negative).
local function read_counter(key)
  local value = redis.pcall('GET', key)
  if value == false then
    return 0
  end
  if type(value) ~= 'string' or not integer(value) or string.sub(value, 1, 1) == '-' then
    return nil
  end
  return tonumber(value)
end

