#!lua flags=allow-oom
-- release.lua: give back one hold of a lock; the last one frees it and tells waiters.
--
-- KEYS[1]  the lock hash `<ns>:{name}` (see acquire.lua)
-- KEYS[2]  the release channel `<ns>:{name}:released`, passed as a key so that a
--          cluster routes it with the lock (same hash slot)
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds to keep at least while holds remain
-- ARGV[3]  attempt id, unique per client: a replay of an applied attempt changes nothing
-- ARGV[4]  "PUBLISH", or "SPUBLISH" on a cluster
--
-- Returns
--   {1, remaining}  one hold given back; remaining 0 means the lock is free and a
--                   message went out on KEYS[2]: the owner id, so that a client
--                   hearing the same release from several Redlock nodes wakes one
--                   waiter, not one per node
--   {-1}            this owner does not hold the lock (its lease ended, or it was
--                   force-unlocked, or a replayed final release)
--   {-2}            KEYS[1] holds a value of another type
--
-- allow-oom: a full server must still let locks go. The message is published
-- before the delete, so a user without channel permission changes nothing.

local lock, channel = KEYS[1], KEYS[2]
local owner, lease, attempt, publish = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local kind = redis.call('TYPE', lock)['ok']
if kind == 'none' then
  return {-1}
end
if kind ~= 'hash' then
  return {-2}
end

local count = tonumber(redis.call('HGET', lock, owner))
if not count then
  return {-1}
end
if redis.call('HGET', lock, '#op') == attempt then
  return {1, count}
end
if count > 1 then
  count = redis.call('HINCRBY', lock, owner, -1)
  redis.call('HSET', lock, '#op', attempt)
  redis.call('PEXPIRE', lock, lease, 'GT')
  return {1, count}
end

redis.call(publish, channel, owner)
redis.call('DEL', lock)
return {1, 0}
