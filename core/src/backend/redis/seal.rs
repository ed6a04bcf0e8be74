//! The secret that seals a Redis backend's settle tickets (see `settle_seal`): one per key
//! prefix, in `<prefix>:{registry}:settle-seal` beside the registry, created by the first
//! process that needs it (`SET … NX`: every other process reads the same one), with no TTL
//! (tickets sealed with it must stay settleable), and cached per backend.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock};

use super::{evalsha, RedisBackend};
use crate::engine::lua::LuaScript;
use crate::error::{Error, Result};
use crate::settle_seal::{random_secret, SealKey, SECRET_BYTES};

/// Sets the secret if the key holds none, and returns the one it holds as its bytes' values
/// (replies of integers are what the scripts' caller reads). ARGV[1] is the candidate secret,
/// its bytes as decimal numbers joined by `:`.
static SCRIPT: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(
        "settle_seal",
        r#"
redis.call('SET', KEYS[1], ARGV[1], 'NX')
local held = redis.call('GET', KEYS[1])
local bytes = {}
for part in string.gmatch(held, '%d+') do bytes[#bytes + 1] = tonumber(part) end
return bytes
"#,
    )
});

impl RedisBackend {
    /// The key sealing this backend's tickets: the cached one, or (`refresh`, or none cached
    /// yet) the one Redis holds, created if none exists.
    pub(crate) async fn seal_key(&self, refresh: bool) -> Result<Arc<SealKey>> {
        if let (false, Some(key)) = (refresh, self.seal_key.lock().clone()) {
            return Ok(key);
        }
        let sent = AtomicBool::new(false);
        let reply = evalsha::run_cmd(&self.connections, self.deadline, &SCRIPT, self.seal_cmd(), &sent).await?;
        self.cache_seal_key(&reply)
    }

    /// Blocking form of [`RedisBackend::seal_key`].
    pub(crate) fn seal_key_blocking(&self, refresh: bool) -> Result<Arc<SealKey>> {
        if let (false, Some(key)) = (refresh, self.seal_key.lock().clone()) {
            return Ok(key);
        }
        let sent = AtomicBool::new(false);
        let reply = evalsha::run_cmd_blocking(&self.connections, self.deadline, &SCRIPT, self.seal_cmd(), &sent)?;
        self.cache_seal_key(&reply)
    }

    fn seal_cmd(&self) -> redis::Cmd {
        let candidate: Vec<String> = random_secret().iter().map(u8::to_string).collect();
        let mut cmd = SCRIPT.evalsha(1);
        cmd.arg(format!("{}:{{registry}}:settle-seal", self.prefix)).arg(candidate.join(":"));
        cmd
    }

    fn cache_seal_key(&self, reply: &[i64]) -> Result<Arc<SealKey>> {
        let secret: Vec<u8> = reply.iter().filter_map(|&b| u8::try_from(b).ok()).collect();
        if secret.len() != SECRET_BYTES || reply.len() != SECRET_BYTES {
            return Err(Error::BackendRejected {
                code: "RK_SEAL".into(),
                message: format!(
                    "the settle-ticket secret under {:?} is not {SECRET_BYTES} bytes: was the key written by something else?",
                    self.prefix
                ),
            });
        }
        let key = Arc::new(SealKey::new(&secret));
        *self.seal_key.lock() = Some(key.clone());
        Ok(key)
    }
}
