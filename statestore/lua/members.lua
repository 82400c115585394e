-- members.lua: prune the expired members of a presence set and return the live ones.
-- A member is live while its expiry is later than the server's clock (TIME).
--
-- KEYS[1]  the sorted set: member -> expiry, unix milliseconds
-- KEYS[2]  the hash: member -> data
--
-- Returns a flat array: member1, data1, member2, data2, ...
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- unpack is limited by the Lua stack, so large sets are handled in batches.
local batch = 1000

local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #expired > 0 then
	redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
	for i = 1, #expired, batch do
		redis.call('HDEL', KEYS[2], unpack(expired, i, math.min(i + batch - 1, #expired)))
	end
end

local live = redis.call('ZRANGE', KEYS[1], 0, -1)
local out = {}
for i = 1, #live, batch do
	local last = math.min(i + batch - 1, #live)
	local data = redis.call('HMGET', KEYS[2], unpack(live, i, last))
	for j = 1, #data do
		out[#out + 1] = live[i + j - 1]
		out[#out + 1] = data[j] or ''
	end
end
return out
