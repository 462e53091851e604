-- KEYS[1] lock key; ARGV[1] token, ARGV[2] release channel
-- 1: deleted; 0: someone else's value; -1: no key at all
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  -- pcall: a user without channel rights may still release
  redis.pcall('PUBLISH', ARGV[2], '')
  return 1
end
if holder then
  return 0
end
return -1
