-- lock.lua: the layout of a lock, and how every script reads and writes it. Not a
-- script of its own: the client sends it in front of each script but
-- order_edge.lua (after their first line), so that all of them read a lock, and
-- judge whether distlock wrote it, in one way.
--
-- THE LAYOUT (version 1). Every kind of lock (plain, fair, read-write, semaphore,
-- each name of a set) is one hash at `<ns>:{name}`, and the key's expiry is the
-- lease (with several holders, the latest of their leases). Its fields:
--
--   field            value                                       kept while
--   <owner id>       the holder's hold count: an integer, 1 or   it holds the lock
--                    more, raised with HINCRBY on a re-entry,
--                    lowered on a release
--   #kind            lock | rw | semaphore | fair                the key exists
--   #layout          1 (this layout's version)                   the key exists
--   #fence           the fencing token of the holder of a plain  it holds, with fencing
--                    or fair lock, or of a writer
--   #writer          the owner id of a read-write lock's writer  a writer holds it
--   #permits         a semaphore's number of permits, as the     the key exists
--                    holders that came first asked for it
--   #permits:<owner> the number a semaphore's holder asked for,  it holds, asking for
--                    when not `#permits` (see `permits_in_force`) another number
--   #next            a fair lock's next ticket                   a waiter came
--   #op:<owner>      the holder's replay record, "<floor>        it holds the lock
--                    <done...>" (see acquire.lua, "Exactly once")
--   #who:<owner>     "<at> <pid> <service> <host> <site>": when  it holds, once its
--                    it took the lock (ms of the server's clock)  client named it (see
--                    and what its client says of it              below)
--   #until:<owner>   when its own lease ends (ms of the server's  it holds a read-write,
--                    clock); the key's expiry is the latest       fair or semaphore lock
--   #wait:<owner>    when a waiter's place ends (ms): a writer   it waits (see below)
--                    of a read-write lock, or a fair waiter
--   #ticket:<owner>  a fair waiter's place in the queue          it waits for a fair lock
--
-- Owner ids never start with '#'. Every value fits a Redis listpack (at most 64
-- bytes) but `#who:<owner>` when a client's service and host names are long: the
-- client keeps what it says to 50 bytes unless those two alone are longer (see
-- lock-core/src/who.rs); such a lock is stored as a hashtable, and nothing else
-- changes.
--
-- A holder is named (`#who:`) when an operator or a waiter's timeout may ask who
-- holds the lock, not on every acquisition: a hold the watchdog renews by its
-- first renewal (renew.lua), which comes 1 s after the grant (sooner when a third
-- of the lease is shorter); a hold of a fixed lease, which nothing renews, by the
-- acquisition itself. A lock held for less than that names no holder.
--
-- Beside the hash, in the same hash slot, and only when used:
--   <ns>:{name}:fence          the fencing counter: a string integer, the last token
--                              issued (see `next_token`), no expiry
--   <ns>:{name}:freed:<owner>  the replay record of that owner's final release,
--                              "<floor> <done...>", for a short while: the retry
--                              of that release reads there that it was applied
--   <ns>:{name}:released       the release channel (a channel, not a key)
--
-- A holder whose `#until` has passed holds nothing; the first script that reads
-- the whole hash drops its fields. A lock nobody holds or waits for has no key.
--
-- TWO WAYS TO RUN. A client loads every script as one Redis function library
-- (lock-core/src/library.rs composes it: this prelude once, then each script in a
-- block of its own, registered as `distlock_<version>_<script>`), so that the
-- functions here and in each script are made once per server, not on every call;
-- where a server refuses functions, it sends this prelude and one script by
-- EVALSHA instead. So each script ends with `return main()`, the part that runs per
-- call, and nothing outside a function reads KEYS or ARGV; in a library each call
-- starts with KEYS and ARGV set to its keys and arguments and `clock` (below) unread.
--
-- What distlock did not write (another type; a hash without `#kind`, of another
-- `#layout`, or with a count, a number or a record not of the forms above) is
-- never changed: the scripts answer a conflict.

local LAYOUT = '1'
-- Every field name of the table above, spelled here only: the fields of the lock,
-- then the prefixes of an owner's fields (the owner id follows). The scripts name
-- fields through this table and write them through the helpers below.
local FIELD = {
  kind = '#kind', layout = '#layout', fence = '#fence', writer = '#writer',
  permits = '#permits', next = '#next',
  op = '#op:', who = '#who:', ['until'] = '#until:', wait = '#wait:', ticket = '#ticket:',
  permits_of = '#permits:',
}
local OP, WHO, UNTIL, WAIT, TICKET = FIELD.op, FIELD.who, FIELD['until'], FIELD.wait, FIELD.ticket
local PERMITS = FIELD.permits_of
-- The lock's fields that hold a number, and what `read_all` calls them.
local NUMBERS = { [FIELD.fence] = 'token', [FIELD.permits] = 'permits', [FIELD.next] = 'next' }
-- The kinds, and their number in replies.
local KINDS = { lock = 0, rw = 1, semaphore = 2, fair = 3 }
-- How long a waiter's place lives after its last look, and how often it looks.
local WAITER_MS = 3000
local WAITER_LOOK_MS = 1000

-- The server's clock, in µs: read once per call (TIME), the same for every step;
-- nil until read (every call starts so, see "Two ways to run").
local clock = nil
local function now_us()
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock
end
local function now_ms()
  return math.floor(now_us() / 1000)
end

-- What `typed` answers for a key of another type.
local WRONG_TYPE = {}

-- The reply of a `redis.pcall` on a key, or WRONG_TYPE when the key holds another
-- type (a conflict the caller answers); any other error (a missing permission, say)
-- is raised as it is.
local function typed(reply)
  if type(reply) == 'table' and reply['err'] then
    if string.find(reply['err'], 'WRONGTYPE', 1, true) then
      return WRONG_TYPE
    end
    error(reply)
  end
  return reply
end

-- Runs `step(...)`, one request of a script run that answers several: its answer,
-- or, when a command it called was refused (a missing ACL permission, say), `{-6,
-- <the error>}` for it alone, so that the requests before and after it in the run
-- are answered for what they did. Each step makes its checks before its writes.
-- A step's second result, if any, is passed on.
local function answer(step, ...)
  local ok, reply, more = pcall(step, ...)
  if ok then
    return reply, more
  end
  if type(reply) == 'table' and reply['err'] then
    return {-6, reply['err']}
  end
  return {-6, tostring(reply)}
end

-- Whether `text` is a number distlock writes: digits, no leading zero, at most 18
-- (so that it cannot overflow).
local function is_number(text)
  return type(text) == 'string' and #text <= 18
    and (text == '0' or string.match(text, '^[1-9]%d*$') ~= nil)
end

-- A replay record "<floor> <done...>": its floor and done, or nil when it is not one.
local function read_record(text)
  if type(text) ~= 'string' then
    return nil
  end
  local floor, done = string.match(text, '^(%d+) ?([%d ]*)$')
  if not floor or not is_number(floor) then
    return nil
  end
  return tonumber(floor), done
end

-- The state of a lock with no key, as `read_all` gives it.
local function free_state()
  return { exists = false, token = 0, holders = {}, waiting = {}, dead = {}, latest = 0 }
end

-- The replay record of an owner with no final release on record (see `read_freed`).
local NO_RECORD = { floor = 0, done = '' }

-- Reads the whole lock at `key` at time `now`: a table with `exists`, `kind`,
-- `token`, `writer`, `permits`, `next`, `holders` (owner -> { count, floor, done,
-- until, who, permits }, live ones only; `permits` only where it differs), `waiting` (owner -> { until, ticket }, live ones),
-- `dead` (owner -> 'holder' or 'waiter', whose lease or place ended: their fields
-- are to be dropped), and
-- `latest` (the latest end of what lives); nil when `key` holds what distlock did
-- not write.
local function read_all(key, now)
  local flat = typed(redis.pcall('HGETALL', key))
  if flat == WRONG_TYPE then
    return nil
  end
  local state = free_state()
  if #flat == 0 then
    return state
  end
  state.exists = true
  local meta = {}
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    if string.byte(field) == 35 then
      meta[field] = value
    elseif is_number(value) and value ~= '0' then
      state.holders[field] = { count = tonumber(value) }
    else
      return nil
    end
  end
  local kind = meta[FIELD.kind]
  if meta[FIELD.layout] ~= LAYOUT or not KINDS[kind] then
    return nil
  end
  state.kind = kind
  for field, target in pairs(NUMBERS) do
    local value = meta[field]
    if value then
      if not is_number(value) then
        return nil
      end
      state[target] = tonumber(value)
    end
  end
  state.writer = meta[FIELD.writer]
  for owner, h in pairs(state.holders) do
    h.floor, h.done = read_record(meta[OP .. owner])
    if not h.floor then
      return nil
    end
    h.who = meta[WHO .. owner]
    local asked = meta[PERMITS .. owner]
    if asked then
      if not is_number(asked) or asked == '0' then
        return nil
      end
      h.permits = tonumber(asked)
    end
    if kind ~= 'lock' then
      local until_text = meta[UNTIL .. owner]
      if not is_number(until_text) then
        return nil
      end
      h['until'] = tonumber(until_text)
      if h['until'] <= now then
        state.holders[owner] = nil
        state.dead[owner] = 'holder'
      else
        state.latest = math.max(state.latest, h['until'])
      end
    end
  end
  for field, value in pairs(meta) do
    if string.sub(field, 1, #WAIT) == WAIT then
      local owner = string.sub(field, #WAIT + 1)
      local ticket = meta[TICKET .. owner]
      if not is_number(value) or (ticket and not is_number(ticket)) then
        return nil
      end
      local until_ms = tonumber(value)
      if until_ms <= now then
        state.dead[owner] = state.dead[owner] or 'waiter'
      else
        state.waiting[owner] = { ['until'] = until_ms, ticket = tonumber(ticket or '0') }
        state.latest = math.max(state.latest, until_ms)
      end
    end
  end
  return state
end

-- The whole lock at `key` as `read_all` reads it, for a new acquisition whose
-- owner's final-release record is at `freed`: one call, reading neither the hash
-- nor the clock, when neither key is there (a new acquisition, most often); the
-- state is then free and says `never_freed` (the record as `read_freed` reads a
-- missing one), so that the take need not look again. `present`: the caller
-- looked already and found one of them there.
local function read_new(key, freed, present)
  if not present and redis.call('EXISTS', key, freed) == 0 then
    local state = free_state()
    state.never_freed = NO_RECORD
    return state
  end
  return read_all(key, now_ms())
end

-- The fields of the lock at `key` that `read_mine` reads for `owner` (kind,
-- layout, fence, count, replay record, own lease), in one call; WRONG_TYPE when the
-- key holds another type.
local function mine_fields(key, owner)
  return typed(redis.pcall('HMGET', key, FIELD.kind, FIELD.layout, FIELD.fence, owner, OP .. owner, UNTIL .. owner))
end

-- Reads the holder `owner` of the lock at `key`: a table with `exists`, `kind`,
-- `token` (the `#fence` field, 0 without one), and `me` ({ count, floor, done,
-- until }: nil when `owner` holds nothing, its `until` nil for a plain lock); nil
-- when `key` holds what distlock did not write. `freed` (a new acquisition: the
-- key of its owner's final-release record): the whole hash, checked (`read_new`,
-- given as `whole`, with its `never_freed`), since a new acquisition must tell a
-- lock held by others from one distlock did not write. Without `freed` (a
-- re-entry, a release, a renewal): the owner's fields alone, in one call
-- (`mine_fields`; `fields`: read already). `present`: as `read_new`'s.
local function read_mine(key, owner, freed, present, fields)
  if freed then
    local whole = read_new(key, freed, present)
    if not whole then
      return nil
    end
    return {
      exists = whole.exists, kind = whole.kind, token = whole.token, me = whole.holders[owner],
      whole = whole, never_freed = whole.never_freed,
    }
  end
  local v = fields or mine_fields(key, owner)
  if v == WRONG_TYPE then
    return nil
  end
  local kind, layout, fence, count, record, until_text = v[1], v[2], v[3], v[4], v[5], v[6]
  if not kind then
    if redis.call('EXISTS', key) == 1 then
      return nil
    end
    return { exists = false, token = 0 }
  end
  if layout ~= LAYOUT or not KINDS[kind] or (fence and not is_number(fence)) then
    return nil
  end
  local state = { exists = true, kind = kind, token = tonumber(fence or '0') }
  if kind == 'lock' then
    until_text = nil
  end
  if count then
    local floor, done = read_record(record)
    if not is_number(count) or count == '0' or not floor
        or (until_text and not is_number(until_text)) then
      return nil
    end
    state.me = { count = tonumber(count), floor = floor, done = done, ['until'] = tonumber(until_text) }
  end
  return state
end

-- The next waiter of a fair lock (as `read_all` read it): the live one with the
-- lowest ticket (nil: none).
local function queue_head(state)
  local head, lowest = nil, nil
  for waiter, place in pairs(state.waiting) do
    if not lowest or place.ticket < lowest then
      head, lowest = waiter, place.ticket
    end
  end
  return head
end

-- The message that tells waiters of a release or a withdrawal: "<owner>:<seq>",
-- and, for a fair lock with waiters, a space and the next waiter's owner id, so
-- that only that one wakes.
local function release_message(state, owner, seq_text)
  local message = owner .. ':' .. seq_text
  local head = state.kind == 'fair' and queue_head(state)
  if head then
    message = message .. ' ' .. head
  end
  return message
end

-- A semaphore's count in force (as `read_all` read it): the smallest number of
-- permits any live holder asked for (its `#permits:<owner>`, else `#permits`), so
-- that no holder ever shares the semaphore with more holders than it asked for;
-- nil when nobody holds a permit. A rolling change of the count is thus served
-- without errors: a larger count takes effect once the holders that asked for
-- less are gone, a smaller one as soon as one of its holders holds.
local function permits_in_force(state)
  local least = nil
  for _, h in pairs(state.holders) do
    local asked = h.permits or state.permits
    if asked and (not least or asked < least) then
      least = asked
    end
  end
  return least
end

-- Whether anybody holds or waits for the lock (as `read_all` read it).
local function occupied(state)
  return next(state.holders) ~= nil or next(state.waiting) ~= nil
end

-- The holder's replay record once its operation `seq` (as the client sent it:
-- `seq_text`) is applied, given the floor the client sent (see acquire.lua, "Exactly
-- once"): the new floor and done, with `seq` added and every number at or below the
-- floor dropped. Nothing when `seq` must not be applied: it was already, or it is
-- settled (at or below the floor).
local function record(h, floor, seq, seq_text)
  floor = math.max(floor, h.floor)
  if seq <= floor then
    return nil
  end
  if h.done == '' then
    return string.format('%d %s', floor, seq_text)
  end
  if not string.find(h.done, ' ', 1, true) then
    -- One operation in doubt (most often): no list to walk.
    local one = tonumber(h.done)
    if one == seq then
      return nil
    end
    if one > floor then
      return string.format('%d %s %s', floor, h.done, seq_text)
    end
    return string.format('%d %s', floor, seq_text)
  end
  local kept = {}
  for n in string.gmatch(h.done, '%d+') do
    if tonumber(n) == seq then
      return nil
    end
    if tonumber(n) > floor then
      kept[#kept + 1] = n
    end
  end
  kept[#kept + 1] = seq_text
  return string.format('%d', floor) .. ' ' .. table.concat(kept, ' ')
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

-- The replay record of a final release at `key` (`<ns>:{name}:freed:<owner>`):
-- { floor, done }, or NO_RECORD when there is none (or it is not one).
local function read_freed(key)
  local floor, done = read_record(typed(redis.pcall('GET', key)))
  if not floor then
    return NO_RECORD
  end
  return { floor = floor, done = done }
end

-- The fencing counter at `key`: 0 when there is none, nil when the key holds what
-- distlock did not write (another type, or not a counter).
local function read_counter(key)
  local value = typed(redis.pcall('GET', key))
  if value == false then
    return 0
  end
  if not is_number(value) then
    return nil
  end
  return tonumber(value)
end

-- Issues the next fencing token of the counter at `key` (which the caller checked
-- with `read_counter`): the larger of the counter + 1 and the server's clock in
-- microseconds, written back to the counter. So a token issued after the counter
-- was lost (a restart without persistence) or fell behind (a failover to a replica
-- that missed the last writes) is still larger than every token issued before, as
-- long as the clock of the server issuing it is not behind the old one's and fewer
-- than one token a microsecond was issued. Tokens stay below 2^53, which Lua
-- numbers hold exactly, until the year 2255.
local function next_token(key)
  local token = math.max(read_counter(key) + 1, now_us())
  redis.call('SET', key, string.format('%d', token))
  return token
end

-- WRITING A LOCK. Every script writes the hash through the helpers below: a write
-- is a list of fields and values (field, value, ...), made with `put` and written
-- in one HSET by `write`; fields go with `drop` (one HDEL).

-- Adds `field` with `value` to `fields` (field, value, ...), and returns it.
local function put(fields, field, value)
  fields[#fields + 1] = field
  fields[#fields + 1] = value
  return fields
end

-- Writes `fields` (field, value, ...) to the lock at `key`.
local function write(key, fields)
  redis.call('HSET', key, unpack(fields))
end

-- Deletes `fields` (field names) from the lock at `key`.
local function drop(key, fields)
  redis.call('HDEL', key, unpack(fields))
end

-- The fields of a new hash of `kind`.
local function new_lock(kind)
  return { FIELD.kind, kind, FIELD.layout, LAYOUT }
end

-- The `#who:` record of a holder that took the lock `held_ms` ago, of whom its
-- client says `who`.
local function who_record(held_ms, who)
  return string.format('%d', now_ms() - held_ms) .. ' ' .. who
end

-- The fields a new holder `owner` writes, after `fields` (field, value, ...): its
-- count (1), its replay record `record_text`, and what its client says of it (`who`;
-- nil or empty: named later, see `#who:`) with the time it took the lock.
local function new_holder(fields, owner, record_text, who)
  put(fields, owner, '1')
  put(fields, OP .. owner, record_text)
  if who and who ~= '' then
    put(fields, WHO .. owner, who_record(0, who))
  end
  return fields
end

-- Names holder `owner` of the lock at `key`, which took it `held_ms` ago, as its
-- client says (`who`), unless it is named already.
local function name_holder(key, owner, held_ms, who)
  redis.call('HSETNX', key, WHO .. owner, who_record(held_ms, who))
end

-- The fields that name a fencing token's holder, after `fields` (field, value,
-- ...): the token, and for a read-write lock the writer's owner id (`writer`, nil
-- for the other kinds).
local function new_token(fields, token, writer)
  put(fields, FIELD.fence, token)
  if writer then
    put(fields, FIELD.writer, writer)
  end
  return fields
end

-- The fields of the place of waiter `owner`, to delete.
local function place_fields(owner)
  return { WAIT .. owner, TICKET .. owner }
end

-- The fields of holder `owner` (and of its place, when it waited), to delete; with
-- `token_holder`, also the fields that name it the holder of the fencing token.
local function holder_fields(owner, token_holder)
  local fields = {
    owner, OP .. owner, WHO .. owner, UNTIL .. owner, WAIT .. owner, TICKET .. owner,
    PERMITS .. owner,
  }
  if token_holder then
    fields[#fields + 1] = FIELD.writer
    fields[#fields + 1] = FIELD.fence
  end
  return fields
end

-- Gives waiter `owner` of the lock at `key` the next ticket of its fair queue:
-- the ticket, which the caller writes as its `#ticket:`.
local function next_ticket(key)
  return redis.call('HINCRBY', key, FIELD.next, 1)
end

-- Sets the own lease of holder `owner` of the lock at `key` to end at `until_ms`
-- (ms of the server's clock, `now` being now), with `fields` (field, value, ...)
-- written beside it; the key's expiry moves to it unless it is later already.
local function own_lease(key, owner, until_ms, now, fields)
  write(key, put(fields, UNTIL .. owner, until_ms))
  redis.call('PEXPIRE', key, until_ms - now, 'GT')
end

-- Takes the free plain lock at `lock` (as `read_mine` read it: no key) for `owner`,
-- held once for `lease` ms with replay record `record_text`; with `fencing`, issues
-- the next token of the counter at `fence_key` (which the caller checked with
-- `read_counter`). Returns the token, 0 without fencing.
local function take(lock, fence_key, owner, lease, fencing, record_text, who)
  local fields = new_lock('lock')
  local token = 0
  if fencing then
    token = next_token(fence_key)
    new_token(fields, token)
  end
  write(lock, new_holder(fields, owner, record_text, who))
  redis.call('PEXPIRE', lock, lease)
  return token
end

-- Changes the hold count of `owner` (its entry `me`, as `read_mine` read it) by
-- `by` ('1' or '-1'), with its new replay record, keeping its lease at least `lease` ms
-- (the key's expiry for a plain lock, its own `#until` for the others; neither ever
-- moves earlier). Returns the new count. Not for a final release.
local function change_hold(lock, me, owner, by, lease, new_record)
  local count = redis.call('HINCRBY', lock, owner, by)
  local fields = { OP .. owner, new_record }
  if me['until'] then
    local now = now_ms()
    own_lease(lock, owner, math.max(me['until'], now + lease), now, fields)
  else
    write(lock, fields)
    redis.call('PEXPIRE', lock, lease, 'GT')
  end
  return count
end

-- Adds a hold of `owner` (its entry `me`, as `read_mine` read it), its operation
-- `seq` (sent as `seq_text`, with `floor`), to the lock at `lock`, keeping its lease
-- at least `lease` ms. Returns the count: one more, or as it stands when the
-- operation must not be applied (a replay, or settled: see `record`).
local function add_hold(lock, me, owner, lease, floor, seq, seq_text)
  local new_record = record(me, floor, seq, seq_text)
  if not new_record then
    return me.count
  end
  return change_hold(lock, me, owner, '1', lease, new_record)
end

-- Drops the fields of holders and waiters whose time is up, and sets the key's
-- expiry to the latest end of what lives (deletes the key when nothing does), for a
-- lock whose holders have leases of their own. Call it once, after the script's own
-- writes.
local function settle(key, state, now)
  local dead = {}
  for owner, what in pairs(state.dead) do
    local fields
    if what == 'waiter' then
      fields = place_fields(owner)
    else
      local token_holder = state.writer == owner or state.kind == 'fair'
      fields = holder_fields(owner, token_holder)
      if token_holder then
        state.writer = nil
      end
    end
    for _, field in ipairs(fields) do
      dead[#dead + 1] = field
    end
  end
  state.dead = {}
  if not occupied(state) then
    redis.call('DEL', key)
    return
  end
  if #dead > 0 then
    drop(key, dead)
  end
  redis.call('PEXPIRE', key, math.max(state.latest - now, 1))
end
