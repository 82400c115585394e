-- tally.lua: set one field of a tally (a hash of non-negative integers) and
-- keep the sum of its fields beside it, in one step, so that any number of
-- writers keep the sum exact. See statestore/tally.go.
--
-- KEYS[1]  the tally hash: field -> integer
-- KEYS[2]  the sum (an integer string)
-- ARGV[1]  the field
-- ARGV[2]  its new value; 0 or less removes the field
--
-- Returns the sum after.
local old = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local n = tonumber(ARGV[2])
if n > 0 then
	redis.call('HSET', KEYS[1], ARGV[1], n)
else
	n = 0
	redis.call('HDEL', KEYS[1], ARGV[1])
end
if n == old then
	return tonumber(redis.call('GET', KEYS[2]) or '0')
end
local sum = redis.call('INCRBY', KEYS[2], n - old)
if sum < 0 then
	redis.call('SET', KEYS[2], 0)
	sum = 0
end
return sum
