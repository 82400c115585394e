-- append.lua: append to a string unless the result would exceed a size limit.
-- The check and the APPEND run as one script, so concurrent appenders can never
-- push a value past its limit, and the cost is O(len(ARGV[1])).
--
-- KEYS[1]  the string key
-- ARGV[1]  the bytes to append
-- ARGV[2]  the maximum length in bytes after appending; 0 or less means no limit
--
-- Returns the new length, or -1 (and writes nothing) if it would exceed the limit.
local limit = tonumber(ARGV[2])
if limit > 0 and redis.call('STRLEN', KEYS[1]) + string.len(ARGV[1]) > limit then
	return -1
end
return redis.call('APPEND', KEYS[1], ARGV[1])
