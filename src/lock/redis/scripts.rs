//! The Lua scripts: each operation is one atomic round trip, and each is
//! safe to run twice (see the module docs of [`super`]).

use super::options::ttl_ms;
use redis::{Script, ScriptInvocation};
use std::sync::OnceLock;
use std::time::Duration;

pub(super) const ACQUIRE_LUA: &str = r"
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
";

/// The acquire of a once-per-window run: [`ACQUIRE_LUA`] that also keeps
/// the key at least until the window (of the server's clock) ends, and
/// replies with that end. A script of its own, so that the plain acquire
/// pays nothing for it.
pub(super) const ACQUIRE_IN_WINDOW_LUA: &str = r"
-- KEYS[1] lock key, KEYS[2] fence counter
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] window in ms,
-- ARGV[4] '1': only confirm a hold we have
-- Reply {1, fence, '', window end in ms, ms until then} or {0, PTTL, holder, 0, 0}.
-- Never shortens the key's life: a hold confirmed here may already be kept
-- to a later window's end.
-- Redis < 5 lets a script write after TIME only in this mode.
if redis.replicate_commands then redis.replicate_commands() end
local function window_end()
  local window = tonumber(ARGV[3])
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ends = (math.floor(now / window) + 1) * window
  if ends > now + redis.call('PTTL', KEYS[1]) then
    redis.call('PEXPIREAT', KEYS[1], string.format('%d', ends))
  end
  return ends, ends - now
end
if ARGV[4] ~= '1' and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' then
    redis.call('DEL', KEYS[1])
    return fence
  end
  return {1, fence, '', window_end()}
end
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  -- not a string: a backend fault to report, never a busy lock
  local kind = redis.call('TYPE', KEYS[1])['ok']
  return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ' value, not a string')
end
if holder == ARGV[1] then
  -- a hold being confirmed, or a retry whose first reply was lost
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  local fence = tonumber(redis.pcall('GET', KEYS[2]))
  return {1, fence or 0, '', window_end()}
end
if not holder then holder = '' end
return {0, redis.call('PTTL', KEYS[1]), holder, 0, 0}
";

pub(super) const RENEW_LUA: &str = r"
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] ttl in ms,
-- ARGV[3] end of the hold's once-per window in ms ('0': none)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
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

pub(super) const END_WINDOW_LUA: &str = r"
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
";

pub(super) struct Scripts {
    pub(super) acquire: Script,
    pub(super) acquire_in_window: Script,
    pub(super) renew: Script,
    pub(super) release: Script,
    pub(super) end_window: Script,
}

pub(super) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: Script::new(ACQUIRE_LUA),
        acquire_in_window: Script::new(ACQUIRE_IN_WINDOW_LUA),
        renew: Script::new(RENEW_LUA),
        release: Script::new(RELEASE_LUA),
        end_window: Script::new(END_WINDOW_LUA),
    })
}

/// `window_end_ms`: the end of the hold's once-per window (Unix ms of the
/// server's clock), below which the key's life is never shortened; 0: none.
pub(super) fn renew_invocation(
    key: &str,
    token: &str,
    ttl: Duration,
    window_end_ms: i64,
) -> ScriptInvocation<'static> {
    let mut invocation = scripts().renew.prepare_invoke();
    invocation
        .key(key)
        .arg(token)
        .arg(ttl_ms(ttl))
        .arg(window_end_ms);
    invocation
}
