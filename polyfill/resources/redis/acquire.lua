-- KEYS[1] lock key, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] '1': only confirm a hold we have
-- Reply {1, fence, '', 0, 0} or {0, PTTL, holder, 0, 0} (the 0s: no once-per window).
-- Redis < 5 lets a script write after TIME only in this mode.
if redis.replicate_commands then redis.replicate_commands() end
-- The fencing number: INCR of a counter that expires long after its last
-- use (7 days, or 100 TTLs if longer), so no key of ours lasts forever. A
-- counter INCR makes anew (reply 1) starts at the server's TIME in
-- microseconds instead, above any number an earlier counter of this key
-- handed out while the clock does not step back and no more than one
-- acquire a microsecond was made on average.
local function next_fence()
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' then return fence end
  local keep = math.max(604800000, 100 * tonumber(ARGV[2]))
  if fence == 1 then
    local t = redis.call('TIME')
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', string.format('%d', keep))
  else
    redis.call('PEXPIRE', KEYS[2], string.format('%d', keep))
  end
  return fence
end
if ARGV[3] ~= '1' and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = next_fence()
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
