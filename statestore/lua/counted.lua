-- counted.lua: Set, Append or Delete a string and charge the change in its
-- length to a quota counter, in one step, so concurrent writers keep the
-- counter exact and can never take it past its limit.
--
-- KEYS[1]  the string key
-- KEYS[2]  the quota counter (an integer string)
-- KEYS[3]  optional: an outer counter charged the same change (a tenant's
--          total over its workspaces), under its own limit ARGV[5]
-- ARGV[1]  'set', 'append' or 'delete'
-- ARGV[2]  the value (set) or the bytes to append (append); ignored by delete
-- ARGV[3]  the quota's limit in bytes; 0 or less means no limit
-- ARGV[4]  append only: the maximum length after appending; 0 or less means none
-- ARGV[5]  with KEYS[3]: the outer counter's limit; 0 or less means no limit
--
-- Returns {0, n}: done; n is the old length (set, -1 when absent), the new
-- length (append) or the deleted length (delete).
-- {-1}: the append would exceed ARGV[4]; {-2, used, adding}: the quota would
-- pass its limit; {-4, used, adding}: the outer counter would pass its limit;
-- {-3}: delete of a missing key. Refusals write nothing.
local op = ARGV[1]
local limit = tonumber(ARGV[3])
local exists = redis.call('EXISTS', KEYS[1]) == 1
local old = 0
if exists then
	old = redis.call('STRLEN', KEYS[1])
end

local grow
if op == 'set' then
	grow = string.len(ARGV[2]) - old
elseif op == 'append' then
	grow = string.len(ARGV[2])
	local maxLen = tonumber(ARGV[4])
	if maxLen > 0 and old + grow > maxLen then
		return {-1}
	end
else
	if not exists then
		return {-3}
	end
	grow = -old
end

local used = tonumber(redis.call('GET', KEYS[2]) or '0')
if grow > 0 and limit > 0 and used + grow > limit then
	return {-2, used, grow}
end
local outer = #KEYS >= 3
local outerUsed = 0
if outer then
	outerUsed = tonumber(redis.call('GET', KEYS[3]) or '0')
	local outerLimit = tonumber(ARGV[5])
	if grow > 0 and outerLimit > 0 and outerUsed + grow > outerLimit then
		return {-4, outerUsed, grow}
	end
end
-- Each counter is charged the change, and never goes below zero.
local function charge(key, was)
	local d = grow
	if was + d < 0 then
		d = -was
	end
	if d ~= 0 then
		redis.call('INCRBY', key, d)
	end
end
charge(KEYS[2], used)
if outer then
	charge(KEYS[3], outerUsed)
end

if op == 'set' then
	redis.call('SET', KEYS[1], ARGV[2])
	if not exists then
		return {0, -1}
	end
	return {0, old}
elseif op == 'append' then
	return {0, redis.call('APPEND', KEYS[1], ARGV[2])}
end
redis.call('DEL', KEYS[1])
return {0, old}
