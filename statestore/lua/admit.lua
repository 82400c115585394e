-- admit.lua: add a member to a presence set only while the set has fewer live
-- members than a limit: a slot, or one entry of a rate window, counted
-- atomically however many frontends and workers ask at once. Expired
-- members are pruned first, so a holder that died without leaving frees its
-- slot when its ttl ends. A member already live is renewed and admitted.
--
-- KEYS[1]  the sorted set: member -> expiry, unix milliseconds
-- KEYS[2]  the hash: member -> data
-- ARGV[1]  the member
-- ARGV[2]  the member's data
-- ARGV[3]  the limit (<= 0: none)
-- ARGV[4]  the ttl in milliseconds (> 0)
--
-- Returns {1, live count after} when admitted, {0, live count, milliseconds
-- until the earliest member expires} when refused.
local limit = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #expired > 0 then
	redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
	for i = 1, #expired, 1000 do
		redis.call('HDEL', KEYS[2], unpack(expired, i, math.min(i + 999, #expired)))
	end
end

local n = redis.call('ZCARD', KEYS[1])
if limit > 0 and n >= limit and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
	local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
	return {0, n, tonumber(first[2]) - now}
end
if redis.call('ZADD', KEYS[1], now + ttl, ARGV[1]) == 1 then
	n = n + 1
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
	redis.call('PEXPIRE', KEYS[1], ttl)
end
if redis.call('PTTL', KEYS[2]) < ttl then
	redis.call('PEXPIRE', KEYS[2], ttl)
end
return {1, n}
