-- KEYS[1] lock key; ARGV[1] token, ARGV[2] window end in ms, ARGV[3] release channel
-- 2: left to expire at the window's end; 1: the window is over, deleted;
-- 0: someone else's value; -1: no key at all
if redis.replicate_commands then redis.replicate_commands() end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if now < tonumber(ARGV[2]) then
    redis.call('PEXPIREAT', KEYS[1], ARGV[2])
    return 2
  end
  redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', ARGV[3], '')
  return 1
end
if holder then
  return 0
end
return -1
