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

/// The docs' `examples/cli/completions.sh`, run with the built binary first on PATH and a
/// fresh HOME: it writes each shell's completion and the man pages where they are looked for.
#[test]
fn the_docs_completions_example_runs() {
    let home = std::env::temp_dir().join(format!("ratekeeper-completions-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let binary = Path::new(env!("CARGO_BIN_EXE_ratekeeper"));
    let path = format!("{}:{}", binary.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cli/completions.sh");
    let out = Command::new("bash").arg(&script).env("PATH", path).env("HOME", &home).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (file, text) in [
        (".local/share/bash-completion/completions/ratekeeper", "_ratekeeper"),
        (".zfunc/_ratekeeper", "#compdef ratekeeper"),
        (".config/fish/completions/ratekeeper.fish", "complete -c ratekeeper"),
        (".local/share/man/man1/ratekeeper.1", ".TH ratekeeper 1"),
        (".local/share/man/man1/ratekeeper-run.1", ".TH ratekeeper-run 1"),
    ] {
        let written = std::fs::read_to_string(home.join(file)).unwrap_or_else(|e| panic!("~/{file}: {e}"));
        assert!(written.contains(text), "~/{file} lacks {text:?}");
    }
    std::fs::remove_dir_all(&home).unwrap();
}
