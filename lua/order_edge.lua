-- order_edge.lua: record one edge of the lock-order graph that every client of a
-- namespace shares (`LockClientBuilder::share_lock_order`), and tell whether its
-- reverse was recorded before: two services that take two classes of locks in
-- opposite orders can deadlock.
--
-- Sent under `#!lua`, on its own (it reads no lock).
--
-- KEYS[1]  the namespace's graph `<ns>:lock-order`, a hash: for each edge, the
--          field "<class held>\n<class taken>" and, as its value, who took the
--          second while holding the first, and where ("<service> on <host>, pid
--          <pid>: <site> then <site>")
-- ARGV[1]  this edge's field
-- ARGV[2]  the reverse edge's field
-- ARGV[3]  this edge's value
-- ARGV[4]  the most edges the hash keeps: past that, new edges are not recorded
-- ARGV[5]  how long the graph lives after its last new edge, in ms
--
-- Returns the reverse edge's value when it was recorded (this edge is then not
-- recorded: it is an inversion), or false. A key of another type is an error.

local graph = KEYS[1]
local reverse = redis.call('HGET', graph, ARGV[2])
if reverse then
  return reverse
end
if redis.call('HEXISTS', graph, ARGV[1]) == 0 and redis.call('HLEN', graph) < tonumber(ARGV[4]) then
  redis.call('HSET', graph, ARGV[1], ARGV[3])
  redis.call('PEXPIRE', graph, ARGV[5])
end
return false
