-- touch.lua: record a member of a presence set as live until now + ttl, with its data.
-- Expiry is taken from the server's clock (TIME), so clients with skewed clocks
-- agree on who is live. Both keys expire with the longest-lived member, so an
-- abandoned set does not stay in Redis forever.
--
-- KEYS[1]  the sorted set: member -> expiry, unix milliseconds
-- KEYS[2]  the hash: member -> data
-- ARGV[1]  the member
-- ARGV[2]  the member's data
-- ARGV[3]  the ttl in milliseconds (> 0)
--
-- Returns 1.
local ttl = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
	redis.call('PEXPIRE', KEYS[1], ttl)
end
if redis.call('PTTL', KEYS[2]) < ttl then
	redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
