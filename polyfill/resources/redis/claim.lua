-- KEYS[1] claim key '<key>:claim:<window>'; ARGV[1] token, ARGV[2] ms it lasts
-- ('0': give our claim back, as a Redlock that fell short of a majority does)
-- 1: claimed (or it already held our token: a retry whose first reply was
-- lost); 0: someone else claimed the window
if ARGV[2] == '0' then
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
  end
  return 0
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return 1
end
return 0
