//! The engines' Lua: how each engine's `.lua` file becomes the script Redis runs (inside one
//! wrapper that accepts a single call or a batch of calls, after one prelude), and the
//! [`LuaScript`] that names it by SHA1. The Lua shared by every engine is in `.lua` files
//! beside the engines: `wrapper.lua`, `now.lua`, `settle_charge.lua`, `bucket_state.lua`,
//! `hold_check.lua`, `settle_once.lua`. (How a script call reaches Redis is
//! `backend/redis/evalsha.rs`; the Lua of operating tools, not engines, is in
//! `backend/redis/operating_lua/`.)

use std::sync::LazyLock;

use redis::{Cmd, Script};

/// A Lua script: its text (an engine's `.lua` file inside [`WRAPPER`]), and the SHA1 that
/// EVALSHA names it by.
pub(crate) struct LuaScript {
    /// A short name (the engine's), for tools.
    pub name: &'static str,
    /// The text loaded into Redis.
    pub body: String,
    /// What EVALSHA names it by.
    pub sha1: String,
}

/// Every engine's script runs inside this wrapper (`wrapper.lua`), which makes it callable as
/// one call or as a batch of calls (see the Redis backend's `evalsha::batch`); the file says
/// how. A batch costs the server one script invocation, one command parse and one reply write
/// instead of one per call; what that saves is measured in the README (Benchmarks: "Figures
/// behind design choices").
///
/// Every call also passes through the hold check ([`HOLD_CHECK`]: pauses and blocks), written
/// once for every engine, and every script starts with the one [`PRELUDE`] (and the
/// [`BUCKET_FUNCTIONS`] where its engine calls them).
///
/// An engine's body that refuses a check sets `refused` (declared in the wrapper, so that
/// bodies can set it), and so does the hold check: the combined script of `check_all`
/// ([`super::script_all`]) reads it to know which part refused without decoding every engine's
/// reply; a single call ignores it. That script also sets `dry` while it decides its parts: an
/// engine's body then decides a check, and answers it as usual, without recording it (it may
/// still drop state that no longer counts, as a peek does); a single call never sets it.
const WRAPPER: &str = include_str!("wrapper.lua");

/// What every script (each engine's, the hold script, and `check_all`'s combined one) defines
/// first, once per invocation, outside any per-call body (`now.lua`): `now_us` and
/// `CLOCK_SLACK_MS` ("now" is read one way, the server's TIME at most once per invocation), and
/// `unpack` for every Lua the servers embed.
pub(super) const PRELUDE: &str = include_str!("now.lua");

/// The functions of the engines that keep a token bucket's use in ticks (`gcra.lua`,
/// `leased.lua`): a settle's charge (`settle_charge.lua`). They follow the [`PRELUDE`] in those
/// engines' scripts only (and in `check_all`'s combined one, which holds `gcra.lua`): a function
/// is a closure made at every invocation, which a script that never calls it should not pay for.
pub(super) const BUCKET_FUNCTIONS: &str = include_str!("settle_charge.lua");

/// The token bucket's state read and written once (`bucket_state.lua`), in sections that
/// [`expand`] inlines into the bodies that name them.
const BUCKET_STATE: &str = include_str!("bucket_state.lua");

/// `engine` (an engine's `.lua` file) with each line `--@BUCKET_<NAME>@` replaced by the
/// section `--@<NAME>` of `bucket_state.lua`: the token bucket's state is written once and
/// inlined where it runs (a function would cost a closure per invocation and a call per check).
pub(super) fn expand(engine: &str) -> String {
    let mut body = engine.to_owned();
    if !body.contains("--@BUCKET_") {
        return body;
    }
    for section in BUCKET_STATE.split("\n--@").skip(1) {
        let (name, text) = section.split_once('\n').expect("a section of bucket_state.lua has a name line");
        body = body.replacen(&format!("--@BUCKET_{name}@"), text.trim_end_matches('\n'), 1);
    }
    assert!(!body.contains("--@BUCKET_"), "an engine names a section bucket_state.lua does not have");
    body
}

/// The hold check every engine's call starts with (`hold_check.lua`, see [`super::hold`]).
pub(super) const HOLD_CHECK: &str = include_str!("hold_check.lua");

/// Settles apply once per id, written once for every engine (`settle_once.lua`, see
/// `Limiter::settle`).
const SETTLE_ONCE: &str = include_str!("settle_once.lua");

impl LuaScript {
    /// The script `name` whose body is `engine` (an engine's `.lua` file).
    pub(crate) fn new(name: &'static str, engine: &'static str) -> Self {
        Self::wrapped(name, "", engine)
    }

    /// The script `name` whose body is `engine`, an engine that keeps a token bucket's use in
    /// ticks: its prelude also defines the [`BUCKET_FUNCTIONS`].
    pub(crate) fn token_bucket(name: &'static str, engine: &'static str) -> Self {
        Self::wrapped(name, BUCKET_FUNCTIONS, engine)
    }

    /// `engine` inside the [`WRAPPER`], after the [`PRELUDE`] and `functions`.
    fn wrapped(name: &'static str, functions: &str, engine: &'static str) -> Self {
        let body = WRAPPER
            .replacen("--@PRELUDE@", &[PRELUDE, functions].concat(), 1)
            .replacen("--@HOLD_CHECK@", HOLD_CHECK, 1)
            .replacen("--@BODY@", &expand(engine), 1)
            .replacen("--@SETTLE_ONCE@", SETTLE_ONCE, 1);
        let sha1 = Script::new(&body).get_hash().to_owned();
        LuaScript { name, body, sha1 }
    }
}

impl LuaScript {
    /// The script `name` whose whole text is `body` (no wrapper): the combined script.
    pub(crate) fn whole(name: &'static str, body: String) -> Self {
        let sha1 = Script::new(&body).get_hash().to_owned();
        LuaScript { name, body, sha1 }
    }

    /// `EVALSHA <sha1> <keys>`, sized for a short call: append the `keys` keys, then ARGV, with
    /// [`Cmd::arg`] (numbers are written in decimal without an intermediate `String`). The
    /// buffer holds a check's whole command (three to seven keys of about 50 bytes, the spec)
    /// without growing: 160 bytes made every check reallocate and copy it once.
    pub(crate) fn evalsha(&self, keys: usize) -> Cmd {
        let mut cmd = Cmd::with_capacity(16, 512);
        cmd.arg("EVALSHA").arg(self.sha1.as_bytes()).arg(keys);
        cmd
    }

    /// The EVAL equivalent of `evalsha` (same keys and arguments), for a server that does not
    /// have the script cached.
    pub(crate) fn eval_of(&self, evalsha: &Cmd) -> Cmd {
        let mut cmd = Cmd::with_capacity(16, self.body.len() + 160);
        cmd.arg("EVAL").arg(self.body.as_bytes());
        for arg in evalsha.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        cmd
    }
}

/// Generates `all`: the hold script, then every engine's scripts in the order of the table in
/// `kinds.rs`.
macro_rules! script_list {
    ($($variant:ident: $engine:ty, $storage:ident;)*) => {
        /// Every script, for tools and benchmarks.
        fn all() -> impl Iterator<Item = &'static LazyLock<LuaScript>> {
            let engines = [$(<$engine as super::Engine>::SCRIPTS,)*];
            [&super::hold::SCRIPT].into_iter().chain(engines.into_iter().flatten().copied())
        }
    };
}
super::kinds::for_each_engine!(script_list);

/// Computes every script (its text and SHA1) now, on the calling thread. A Redis backend calls
/// it when it is built, so that no call computes one lazily: a process forked while another of
/// its threads was computing a script would wait for that computation forever in the child,
/// where the thread does not exist.
pub(crate) fn prepare_all() {
    for script in all() {
        LazyLock::force(script);
    }
    LazyLock::force(&super::script_all::SCRIPT);
}

/// Every script as (name, text as loaded into Redis), for tools and benchmarks.
pub fn sources() -> Vec<(&'static str, &'static str)> {
    let combined: &'static LuaScript = &super::script_all::SCRIPT;
    all().map(|s| (s.name, s.body.as_str())).chain(std::iter::once((combined.name, combined.body.as_str()))).collect()
}
