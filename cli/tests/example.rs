//! The README's shell example, `examples/cli/operate.sh`, run as pasted against a real Redis
//! with the built binary first on PATH.

mod support;

use std::path::Path;
use std::process::Command;

use support::{mask, RedisServer};

#[test]
fn the_readme_shell_example_runs() {
    let server = RedisServer::start();
    let binary = Path::new(env!("CARGO_BIN_EXE_ratekeeper"));
    let path = format!("{}:{}", binary.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cli/operate.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("PATH", path)
        .env("REDIS_URL", server.url())
        .env_remove("RATEKEEPER_REDIS_URL")
        .output()
        .unwrap();
    let stdout = mask(&String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "report built\n",
        "synced\n",
        "key \"tenant-7\" of limiter \"sync\" now decides with {\"kind\":\"window\",\"limit\":1000,\"interval\":60}\n",
        "limit         1000\nremaining     999\n",
        "key \"tenant-7\" of limiter \"sync\" is reset\n",
        "key \"tenant-7\" of limiter \"sync\" is back to its own spec\n",
        "nightly-report  concurrent",
        "sync            window",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
}
