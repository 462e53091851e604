//! The Lua scripts: each operation is one atomic round trip, and each is
//! safe to run twice (see the module docs of [`super`]). They are the
//! files in `polyfill/resources/redis/`, embedded here and read at run
//! time by cronlock/polyfill.

use super::options::ttl_ms;
use redis::{Script, ScriptInvocation};
use std::sync::OnceLock;
use std::time::Duration;

/// The scripts' directory: inside the polyfill's package, which must be
/// self-contained, so both implementations run these very files (one
/// SHA1 each for `EVALSHA`).
macro_rules! script {
    ($name:literal) => {
        include_str!(concat!("../../../polyfill/resources/redis/", $name, ".lua"))
    };
}

/// Takes the key (`SET NX PX` and the fencing `INCR`), or confirms and
/// extends a hold of ours; busy, it replies when the key expires and who
/// holds it.
const ACQUIRE_LUA: &str = script!("acquire");

/// The acquire of a once-per-window run: [`ACQUIRE_LUA`] that also keeps
/// the key at least until the window (of the server's clock) ends, and
/// replies with that end. A script of its own, so that the plain acquire
/// pays nothing for it.
const ACQUIRE_IN_WINDOW_LUA: &str = script!("acquire_in_window");

/// `PEXPIRE` if the key is still ours, never below its once-per window's end.
const RENEW_LUA: &str = script!("renew");

/// `DEL` and `PUBLISH` if the key is still ours.
const RELEASE_LUA: &str = script!("release");

/// The end of a once-per hold: left to expire at the window's end, or
/// deleted once it is over.
const END_WINDOW_LUA: &str = script!("end_window");

/// A window claim (`SET NX PX` of `<key>:claim:<window>`, our own token
/// counting as claimed), or with 0 ms its token-checked give-back.
const CLAIM_LUA: &str = script!("claim");

pub(super) struct Scripts {
    pub(super) acquire: Script,
    pub(super) acquire_in_window: Script,
    pub(super) renew: Script,
    pub(super) release: Script,
    pub(super) end_window: Script,
    pub(super) claim: Script,
}

pub(super) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: Script::new(ACQUIRE_LUA),
        acquire_in_window: Script::new(ACQUIRE_IN_WINDOW_LUA),
        renew: Script::new(RENEW_LUA),
        release: Script::new(RELEASE_LUA),
        end_window: Script::new(END_WINDOW_LUA),
        claim: Script::new(CLAIM_LUA),
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
