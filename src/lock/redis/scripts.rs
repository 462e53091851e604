//! The three Lua scripts: each operation is one atomic round trip, and each
//! is safe to run twice (see the module docs of [`super`]).

use super::options::ttl_ms;
use redis::{Script, ScriptInvocation};
use std::sync::OnceLock;
use std::time::Duration;

pub(super) const ACQUIRE_LUA: &str = r"
-- KEYS[1] lock key, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] '1': only confirm a hold we have
if ARGV[3] ~= '1' and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' then
    -- do not leave behind a lock the caller will never know it holds
    redis.call('DEL', KEYS[1])
    return fence
  end
  return {1, fence, ''}
end
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] then
  -- Ours already: a hold being confirmed, or a retry whose first reply was
  -- lost. Nobody INCRs the fence while we hold the key, so it is still ours.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local fence = tonumber(redis.pcall('GET', KEYS[2]))
  return {1, fence or 0, ''}
end
-- busy: when it expires at the latest, and who holds it (for the log line)
if type(holder) ~= 'string' then holder = '' end
return {0, redis.call('PTTL', KEYS[1]), holder}
";

pub(super) const RENEW_LUA: &str = r"
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] ttl in ms
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

pub(super) const RELEASE_LUA: &str = r"
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
";

pub(super) struct Scripts {
    pub(super) acquire: Script,
    pub(super) renew: Script,
    pub(super) release: Script,
}

pub(super) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: Script::new(ACQUIRE_LUA),
        renew: Script::new(RENEW_LUA),
        release: Script::new(RELEASE_LUA),
    })
}

pub(super) fn renew_invocation(key: &str, token: &str, ttl: Duration) -> ScriptInvocation<'static> {
    let mut invocation = scripts().renew.prepare_invoke();
    invocation.key(key).arg(token).arg(ttl_ms(ttl));
    invocation
}
