#!lua
-- acquire.lua: take a lock, or re-enter one the caller already holds.
--
-- KEYS[1]  the lock hash `<ns>:{name}`: owner id -> hold count, plus two metadata
--          fields: `#op` (id of the last attempt applied) and `#fence` (the token
--          issued with the first acquisition, 0 without fencing)
-- KEYS[2]  the fencing counter `<ns>:{name}:fence`; read and written only when
--          ARGV[3] is "1" and the lock is free
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds, validated by the client (1 ..= the documented maximum)
-- ARGV[3]  "1": issue a fencing token when this call creates the lock; "0": do not
-- ARGV[4]  attempt id, unique per client: a replay of an applied attempt changes nothing
-- ARGV[5]  "1": the caller believes it holds the lock already (a re-entry), so the
--          lock must never be created here; "0": an ordinary acquire
--
-- Returns
--   {1, hold_count, fence}  acquired; fence is 0 without fencing
--   {0, pttl}               held by another owner; pttl is its remaining lease in ms
--                           (-1 when the hash has no expiry), the waiter's sleep cap
--   {-1}                    re-entry asked, but this owner no longer holds the lock
--   {-2}                    KEYS[1] or KEYS[2] holds a value of another type
--
-- Every check comes before the first write: a Lua error does not roll back.

local lock, fence_key = KEYS[1], KEYS[2]
local owner, lease, fencing, attempt, reentry = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local kind = redis.call('TYPE', lock)['ok']
if kind == 'none' then
  if reentry == '1' then
    return {-1}
  end
  local token = 0
  if fencing == '1' then
    local fence_kind = redis.call('TYPE', fence_key)['ok']
    if fence_kind ~= 'none' and (fence_kind ~= 'string' or not tonumber(redis.call('GET', fence_key))) then
      return {-2}
    end
    token = redis.call('INCR', fence_key)
  end
  redis.call('HSET', lock, owner, 1, '#op', attempt, '#fence', token)
  redis.call('PEXPIRE', lock, lease)
  return {1, 1, token}
end
if kind ~= 'hash' then
  return {-2}
end

local count = redis.call('HGET', lock, owner)
if not count then
  if reentry == '1' then
    return {-1}
  end
  return {0, redis.call('PTTL', lock)}
end

local token = tonumber(redis.call('HGET', lock, '#fence')) or 0
if redis.call('HGET', lock, '#op') == attempt then
  return {1, tonumber(count), token}
end
count = redis.call('HINCRBY', lock, owner, 1)
redis.call('HSET', lock, '#op', attempt)
redis.call('PEXPIRE', lock, lease, 'GT')
return {1, count, token}
