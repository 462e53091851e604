-- KEYS[1] lock key; ARGV[1] token, ARGV[2] ttl in ms,
-- ARGV[3] end of the hold's once-per window in ms ('0': none)
-- 1: extended; 0: someone else's value; -1: no key at all
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  if holder then
    return 0
  end
  return -1
end
if ARGV[3] ~= '0' then
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  -- never shorten the key's life below its window's end
  if now + tonumber(ARGV[2]) < tonumber(ARGV[3]) then
    return redis.call('PEXPIREAT', KEYS[1], ARGV[3])
  end
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
