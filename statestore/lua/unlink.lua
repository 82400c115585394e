-- unlink.lua: remove entries from a shared value's index, and their
-- references; a value whose last reference goes is deleted and its length
-- released from the quota. See statestore/counted.go.
--
-- KEYS[1]  the index hash: field -> entry
-- KEYS[2]  the links hash: field -> value key
-- KEYS[3]  the refs hash: value key -> "count size"
-- KEYS[4]  the quota counter
-- ARGV     the fields to remove
--
-- The value keys are read from the links hash, so they are not in KEYS: the
-- script needs a single Redis server, as the package does.
--
-- Returns the number of values deleted.
local deleted = 0
for i = 1, #ARGV do
	local field = ARGV[i]
	redis.call('HDEL', KEYS[1], field)
	local vk = redis.call('HGET', KEYS[2], field)
	if vk then
		redis.call('HDEL', KEYS[2], field)
		local rec = redis.call('HGET', KEYS[3], vk)
		if rec then
			local c, s = string.match(rec, '^(%d+) (%d+)$')
			local count, size = tonumber(c), tonumber(s)
			if count <= 1 then
				redis.call('HDEL', KEYS[3], vk)
				redis.call('DEL', vk)
				local used = tonumber(redis.call('GET', KEYS[4]) or '0')
				redis.call('INCRBY', KEYS[4], -math.min(size, used))
				deleted = deleted + 1
			else
				redis.call('HSET', KEYS[3], vk, (count - 1) .. ' ' .. size)
			end
		end
	end
end
return deleted
