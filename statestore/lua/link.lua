-- link.lua: add an entry to a shared value's index, and a reference to the
-- value, creating the value (and charging its length to the quota) when no
-- entry referred to it. See statestore/counted.go.
--
-- KEYS[1]  the index hash: field -> entry
-- KEYS[2]  the links hash: field -> value key
-- KEYS[3]  the refs hash: value key -> "count size"
-- KEYS[4]  the value key
-- KEYS[5]  the quota counter
-- ARGV[1]  the field
-- ARGV[2]  the entry
-- ARGV[3]  '1' when ARGV[4] holds the value's data, '0' when none was sent
-- ARGV[4]  the data
-- ARGV[5]  ttl in milliseconds, 0 for none: the value lives at least this long
-- ARGV[6]  the quota's limit in bytes; 0 or less means no limit
--
-- Returns {1} linked, {0} the field was already there (nothing changed),
-- {-1} the value must be created and no data was sent, {-2, used, adding}
-- creating the value would pass the quota's limit. Refusals write nothing.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
	return {0}
end
local count, size = 0, 0
local rec = redis.call('HGET', KEYS[3], KEYS[4])
if rec then
	local c, s = string.match(rec, '^(%d+) (%d+)$')
	count, size = tonumber(c), tonumber(s)
end
local exists = redis.call('EXISTS', KEYS[4]) == 1
if not exists and ARGV[3] ~= '1' then
	return {-1}
end
local ttl = tonumber(ARGV[5])

if count == 0 then
	if exists then
		size = redis.call('STRLEN', KEYS[4])
	else
		size = string.len(ARGV[4])
	end
	local limit = tonumber(ARGV[6])
	local used = tonumber(redis.call('GET', KEYS[5]) or '0')
	if limit > 0 and used + size > limit then
		return {-2, used, size}
	end
	redis.call('INCRBY', KEYS[5], size)
end

if not exists then
	if ttl > 0 then
		redis.call('SET', KEYS[4], ARGV[4], 'PX', ttl)
	else
		redis.call('SET', KEYS[4], ARGV[4])
	end
elseif ttl > 0 then
	local left = redis.call('PTTL', KEYS[4])
	if left >= 0 and left < ttl then
		redis.call('PEXPIRE', KEYS[4], ttl)
	end
end
redis.call('HSET', KEYS[3], KEYS[4], (count + 1) .. ' ' .. size)
redis.call('HSET', KEYS[2], ARGV[1], KEYS[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {1}
