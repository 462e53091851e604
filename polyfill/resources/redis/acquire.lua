-- KEYS[1] lock key, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] '1': only confirm a hold we have
-- Reply {1, fence, '', 0, 0} or {0, PTTL, holder, 0, 0} (the 0s: no once-per window).
if ARGV[3] ~= '1' and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' then
    -- do not leave behind a lock the caller will never know it holds
    redis.call('DEL', KEYS[1])
    return fence
  end
  return {1, fence, '', 0, 0}
end
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  -- not a string: a backend fault to report, never a busy lock
  local kind = redis.call('TYPE', KEYS[1])['ok']
  return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ' value, not a string')
end
if holder == ARGV[1] then
  -- Ours already: a hold being confirmed, or a retry whose first reply was
  -- lost. Nobody INCRs the fence while we hold the key, so it is still ours.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local fence = tonumber(redis.pcall('GET', KEYS[2]))
  return {1, fence or 0, '', 0, 0}
end
-- busy: when it expires at the latest, and who holds it (for the log line)
if not holder then holder = '' end
return {0, redis.call('PTTL', KEYS[1]), holder, 0, 0}
