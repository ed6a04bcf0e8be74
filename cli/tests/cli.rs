//! The `ratekeeper` binary as an operator uses it, against a real redis-server and a 3-master
//! Redis Cluster: output checked with the times masked, exit codes, and the mutex of `run`.

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use ratekeeper_test_support::sentinel::SERVICE;
use serde_json::Value;
use support::{mask, ratekeeper, run, wait_until, RedisCluster, RedisServer, SentinelGroup};

/// A generous hang guard for things that happen in milliseconds.
const HANG: Duration = Duration::from_secs(60);

fn ok(args: &[&str]) -> String {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "ratekeeper {args:?} failed: {err}");
    out
}

/// `--prefix`'s help names the prefix the library writes (it used to name `ratekeeper`, and
/// `--prefix ratekeeper limits` then showed an empty table).
#[test]
fn the_prefix_help_names_the_library_default() {
    let expected = format!("[default: {}]", ratekeeper::DEFAULT_PREFIX);
    for args in [&["--help"][..], &["limits", "--help"][..]] {
        let out = ok(args);
        let line = out.lines().skip_while(|l| !l.contains("--prefix")).take(3).collect::<Vec<_>>().join(" ");
        assert!(line.contains(&expected), "ratekeeper {args:?}: --prefix should say {expected}: {line}");
    }
}

#[test]
fn usage_errors_exit_2_and_name_the_culprit() {
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    for sub in [
        "demo",
        "limits",
        "inspect",
        "set",
        "unset",
        "reset",
        "resume",
        "block",
        "unblock",
        "run",
        "serve",
        "completions",
    ] {
        assert!(out.contains(sub), "--help does not list {sub}: {out}");
    }
    for sub in [
        "demo",
        "limits",
        "inspect",
        "set",
        "unset",
        "reset",
        "resume",
        "block",
        "unblock",
        "run",
        "serve",
        "completions",
    ] {
        let (code, out, _) = run(&[sub, "--help"]);
        assert_eq!(code, 0, "{sub} --help");
        assert!(out.contains("Usage: ratekeeper"), "{sub} --help: {out}");
    }
    let (code, _, err) = run(&["frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.contains("unrecognized subcommand 'frobnicate'"), "{err}");
    let (code, _, err) = run(&["limits", "--frob"]);
    assert_eq!(code, 2);
    assert!(err.contains("unexpected argument '--frob'"), "{err}");
    let (code, _, err) = run(&["run", "job"]);
    assert_eq!(code, 2, "run without a command");
    assert!(err.contains("<COMMAND>"), "{err}");
    let (code, _, err) = run(&["demo", "--workers", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("`--workers`"), "{err}");
    let (code, _, err) = run(&["run", "job", "--wait", "ten", "--", "true"]);
    assert_eq!(code, 2);
    assert!(err.contains("'--wait <SECONDS>'"), "{err}");
    // The registry lives in Redis: without one, say how to give it.
    let (code, _, err) = run(&["limits"]);
    assert_eq!(code, 1);
    assert!(err.contains("--redis URL") && err.contains("RATEKEEPER_REDIS_URL"), "{err}");
    // No Redis at the URL: the address tried and how to point elsewhere (tests/first_hour).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("redis://127.0.0.1:{closed}");
    let (code, _, err) = run(&["--redis", &url, "limits"]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("cannot connect to Redis at 127.0.0.1:{closed}")), "{err}");
    assert!(err.contains("is redis-server running there?") && err.contains("redis://HOST:PORT"), "{err}");
}

#[test]
fn completions_are_generated_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = ok(&["completions", shell]);
        assert!(out.contains("inspect") && out.contains("--redis"), "{shell}: {out}");
    }
    assert_eq!(run(&["completions", "tcsh"]).0, 2);
}

#[test]
fn man_pages_are_written_for_the_command_and_each_subcommand() {
    let dir = std::env::temp_dir().join(format!("ratekeeper-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let target = dir.join("man1");
    ok(&["man-pages", target.to_str().unwrap()]);
    for page in ["ratekeeper", "ratekeeper-limits", "ratekeeper-run", "ratekeeper-serve", "ratekeeper-completions"] {
        let text =
            std::fs::read_to_string(target.join(format!("{page}.1"))).unwrap_or_else(|e| panic!("{page}.1: {e}"));
        assert!(text.contains(&format!(".TH {page} 1")), "{page}.1 is not the man page of {page}: {text}");
    }
    let top = std::fs::read_to_string(target.join("ratekeeper.1")).unwrap();
    assert!(top.contains("inspect") && top.contains("\\-\\-redis"), "{top}");
    // A directory it cannot create is an error naming it, exit code 1.
    let blocked = dir.join("file");
    std::fs::write(&blocked, "").unwrap();
    let (code, _, err) = run(&["man-pages", blocked.join("man1").to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot write the man pages into") && err.contains("man1"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn demo_runs_on_memory_and_on_redis() {
    let small = ["--records", "300", "--capacity", "2000", "--cost", "10", "--window-ms", "200"];
    let server = RedisServer::start();
    let url = server.url();
    for backend in [vec![], vec!["--redis", url.as_str()]] {
        let args: Vec<&str> = ["demo"].iter().copied().chain(small).chain(backend.iter().copied()).collect();
        let out = ok(&args);
        assert!(out.contains("run           records   requests sent   throttled   sends/record    elapsed"), "{out}");
        assert!(out.lines().any(|l| l.starts_with("naive ")) && out.lines().any(|l| l.starts_with("ratekeeper ")));
    }
    // On Redis the demo's bucket is in the registry.
    assert!(ok(&["--redis", &url, "limits"]).contains("ingest"));
}

/// `set`, `limits`, `inspect`, `unset` and errors, on one backend's command-line options.
fn operate(backend: &[&str]) {
    let with = |args: &[&str]| -> Vec<String> { backend.iter().chain(args).map(|s| s.to_string()).collect() };
    let ok_with = |args: &[&str]| {
        let args = with(args);
        ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let fail_with = |args: &[&str]| {
        let args = with(args);
        let (code, _, err) = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, 1, "{args:?} should fail");
        err
    };
    // A limiter in the registry: built by a run.
    ok_with(&["run", "api", "--spec", r#"{"kind":"window","limit":5,"interval":60}"#, "--", "true"]);
    // Each spec in words, as the Limits page writes it; `--json` keeps the spec's JSON.
    let table = ok_with(&["limits"]);
    assert_eq!(
        mask(&table),
        "NAME  KIND    SPEC          OVERRIDES  PROCESSES  LAST SEEN  ALLOWED  REFUSED\n\
         api   window  5 per minute  -                  1  Ns ago           1        0\n",
        "{table}"
    );

    ok_with(&["set", "api", r#"{"kind":"window","limit":7,"interval":60}"#, "--key", "tenant-7"]);
    let table = ok_with(&["limits"]);
    assert!(table.contains("  5 per minute  tenant-7=7 per minute  "), "{table}");
    // A limiter or key in shadow mode says so in words.
    ok_with(&["set", "api", r#"{"kind":"window","limit":9,"interval":60,"shadow":true}"#, "--key", "tenant-9"]);
    let table = ok_with(&["limits"]);
    assert!(table.contains("tenant-9=9 per minute, in shadow mode"), "{table}");
    ok_with(&["unset", "api", "--key", "tenant-9"]);
    let listed: Value = serde_json::from_str(&ok_with(&["limits", "--json"])).unwrap();
    let api = &listed.as_array().unwrap()[0];
    assert_eq!(api["spec"], serde_json::json!({"kind": "window", "limit": 5, "interval": 60}));
    assert_eq!(api["name"], "api");
    assert_eq!(api["overrides"][0]["key"], "tenant-7");
    assert_eq!(api["overrides"][0]["spec"]["limit"], 7);
    assert_eq!(api["allowed"], 1);

    let inspected: Value = serde_json::from_str(&ok_with(&["inspect", "api", "--key", "tenant-7", "--json"])).unwrap();
    assert_eq!((inspected["limit"].as_u64(), inspected["remaining"].as_u64()), (Some(7), Some(7)));
    assert_eq!(inspected["effective_spec"]["limit"], 7);
    let own: Value = serde_json::from_str(&ok_with(&["inspect", "api", "--json"])).unwrap();
    assert_eq!((own["limit"].as_u64(), own["remaining"].as_u64()), (Some(5), Some(4)), "the run took one");
    let text = ok_with(&["inspect", "api"]);
    assert!(text.contains("remaining     4\n") && text.contains("kind          window\n"), "{text}");

    ok_with(&["unset", "api", "--key", "tenant-7"]);
    let listed: Value = serde_json::from_str(&ok_with(&["limits", "--json"])).unwrap();
    assert_eq!(listed[0]["overrides"], serde_json::json!([]));

    // Bad input: a typed error naming what is wrong, nothing written.
    let err = fail_with(&["set", "api", r#"{"kind":"window","limit":0,"interval":60}"#]);
    assert!(err.starts_with("error: invalid argument `limit`"), "{err}");
    let err = fail_with(&["set", "api", "{not json"]);
    assert!(err.starts_with("error: invalid argument `spec`"), "{err}");
    let err = fail_with(&["set", "api", r#"{"kind":"concurrent","limit":1}"#]);
    assert!(err.contains("a concurrent override cannot apply to it (one name, one kind)"), "{err}");
    let err = fail_with(&["set", "bad name!", r#"{"kind":"window","limit":1,"interval":60}"#]);
    assert!(err.starts_with("error: invalid argument `name`"), "{err}");
    let err = fail_with(&["inspect", "nope"]);
    assert!(err.contains("no limiter \"nope\" in the registry"), "{err}");
    let err = fail_with(&["reset", "nope"]);
    assert!(err.contains("no limiter \"nope\" in the registry"), "{err}");
    let listed: Value = serde_json::from_str(&ok_with(&["limits", "--json"])).unwrap();
    assert_eq!(listed[0]["overrides"], serde_json::json!([]));

    // Exit codes of run on this backend too.
    let code = |args: &[&str]| {
        let args = with(args);
        run(&args.iter().map(String::as_str).collect::<Vec<_>>()).0
    };
    assert_eq!(code(&["run", "job", "--", "true"]), 0);
    assert_eq!(code(&["run", "job", "--", "sh", "-c", "exit 3"]), 3);
    assert_eq!(code(&["run", "job", "--", "/nonexistent/command"]), 127);
}

#[test]
fn operate_a_standalone_redis() {
    let server = RedisServer::start();
    operate(&["--redis", &server.url()]);
}

#[test]
fn operate_a_cluster() {
    let cluster = RedisCluster::start();
    operate(&["--cluster", &cluster.seeds().join(",")]);
}

#[test]
fn operate_a_sentinel_managed_primary() {
    let group = SentinelGroup::start();
    operate(&["--sentinel", &group.sentinel_addresses().join(","), "--service", SERVICE]);
}

#[test]
fn the_environment_names_the_redis() {
    let server = RedisServer::start();
    let out = ratekeeper().env("RATEKEEPER_REDIS_URL", server.url()).args(["run", "x", "--", "true"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = ratekeeper().env("RATEKEEPER_REDIS_URL", server.url()).arg("limits").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("concurrent"));
    // A flag wins over the variable, without a conflict.
    let dead = "redis://127.0.0.1:1";
    let out =
        ratekeeper().env("RATEKEEPER_REDIS_URL", dead).args(["--redis", &server.url(), "limits"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("concurrent"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = ratekeeper().env("RATEKEEPER_REDIS_URL", dead).args(["--cluster", dead, "limits"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "--cluster is used (and fails), not refused as a conflict");
    // The demo stays on memory.
    let out = ratekeeper()
        .env("RATEKEEPER_REDIS_URL", dead)
        .args(["demo", "--records", "50", "--capacity", "1000", "--cost", "10", "--window-ms", "100"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn reset_forgets_a_key() {
    let server = RedisServer::start();
    let url = server.url();
    let spec = r#"{"kind":"window","limit":1,"interval":3600}"#;
    let once = |key: &str| run(&["--redis", &url, "run", "daily", "--spec", spec, "--key", key, "--", "true"]).0;
    assert_eq!(once("a"), 0);
    assert_eq!(once("a"), 75);
    assert_eq!(once("b"), 0, "keys are separate");
    ok(&["--redis", &url, "reset", "daily", "--key", "a"]);
    assert_eq!(once("a"), 0);
    assert_eq!(once("b"), 75, "only key a was reset");
}

/// Issue 46: the key goes after the name, as the page shows it (`inspect api tenant-7` was
/// refused with `unexpected argument`); `--key` still works, and both at once is a usage error.
/// `forget` removes a limiter from the registry (it stayed listed for 90 days).
#[test]
fn the_key_is_positional_and_forget_removes_a_limiter() {
    let server = RedisServer::start();
    let url = server.url();
    let spec = r#"{"kind":"window","limit":1,"interval":3600}"#;
    assert_eq!(run(&["--redis", &url, "run", "daily", "--spec", spec, "--key", "a", "--", "true"]).0, 0);
    let by_position: Value = serde_json::from_str(&ok(&["--redis", &url, "inspect", "daily", "a", "--json"])).unwrap();
    let by_flag: Value =
        serde_json::from_str(&ok(&["--redis", &url, "inspect", "daily", "--key", "a", "--json"])).unwrap();
    assert_eq!(by_position["key"], "a", "{by_position}");
    assert_eq!(by_position["state"], by_flag["state"]);
    assert_eq!(run(&["--redis", &url, "inspect", "daily", "a", "--key", "b"]).0, 2, "one key, given once");
    ok(&["--redis", &url, "reset", "daily", "a"]);
    assert_eq!(
        run(&["--redis", &url, "run", "daily", "--spec", spec, "--key", "a", "--", "true"]).0,
        0,
        "reset by position"
    );
    assert!(ok(&["--redis", &url, "limits"]).contains("daily"));
    assert!(ok(&["--redis", &url, "forget", "daily"]).contains("is forgotten"));
    assert!(!ok(&["--redis", &url, "limits"]).contains("daily"), "no longer listed");
    assert!(ok(&["--redis", &url, "forget", "daily"]).contains("was not in the registry"));
}

/// `resume` ends a pause a process wrote (after a third party's 429), for one key, keeping the
/// key's other state; a key that is not paused says so.
#[test]
fn resume_ends_a_pause() {
    let server = RedisServer::start();
    let url = server.url();
    let spec = r#"{"kind":"window","limit":5,"interval":3600}"#;
    let once = |key: &str| run(&["--redis", &url, "run", "upstream", "--spec", spec, "--key", key, "--", "true"]).0;
    assert_eq!(once("a"), 0);
    let backend = ratekeeper::Backend::redis(&url).unwrap();
    let limiter = backend.window("upstream", 5, Duration::from_secs(3600)).unwrap();
    let hostile = [("Retry-After", "2200000000")];
    let paused = limiter.observe_blocking(Some("a"), 429, &hostile).unwrap();
    assert_eq!(paused, Some(Duration::from_secs(3600)), "70 years asked, the default max_pause written");
    assert_eq!(once("a"), 75, "paused");
    let out = ok(&["--redis", &url, "resume", "upstream", "--key", "a"]);
    assert!(out.contains("key \"a\" of limiter \"upstream\" is resumed"), "{out}");
    assert_eq!(once("a"), 0);
    assert_eq!(limiter.peek_blocking(Some("a")).unwrap().remaining, 3, "the count was kept: two runs");
    let out = ok(&["--redis", &url, "resume", "upstream", "--key", "a"]);
    assert!(out.contains("was not paused"), "{out}");
    let (code, _, err) = run(&["--redis", &url, "resume", "nope"]);
    assert!(code != 0 && err.contains("no limiter \"nope\" in the registry"), "{code} {err}");
}

/// `block` keeps a key refused in every process for the seconds given; `unblock` ends it early,
/// keeping the key's other state; a key that is not blocked says so; a bad duration is named.
#[test]
fn block_and_unblock_a_key() {
    let server = RedisServer::start();
    let url = server.url();
    let spec = r#"{"kind":"window","limit":5,"interval":3600}"#;
    let once = |key: &str| run(&["--redis", &url, "run", "login", "--spec", spec, "--key", key, "--", "true"]).0;
    assert_eq!(once("mallory"), 0);
    let out = ok(&["--redis", &url, "block", "login", "600", "--key", "mallory"]);
    assert!(out.contains("key \"mallory\" of limiter \"login\" is blocked for 600s"), "{out}");
    assert_eq!(once("mallory"), 75, "blocked");
    assert_eq!(once("alice"), 0, "another key is not blocked");
    let backend = ratekeeper::Backend::redis(&url).unwrap();
    let limiter = backend.window("login", 5, Duration::from_secs(3600)).unwrap();
    let refused = limiter.peek_blocking(Some("mallory")).unwrap();
    assert!(!refused.allowed && refused.retry_after > Duration::from_secs(590), "{refused:?}");
    let out = ok(&["--redis", &url, "unblock", "login", "--key", "mallory"]);
    assert!(out.contains("key \"mallory\" of limiter \"login\" is unblocked"), "{out}");
    assert_eq!(once("mallory"), 0);
    assert_eq!(limiter.peek_blocking(Some("mallory")).unwrap().remaining, 3, "the count was kept: two runs");
    let out = ok(&["--redis", &url, "unblock", "login", "--key", "mallory"]);
    assert!(out.contains("was not blocked"), "{out}");
    let (code, _, err) = run(&["--redis", &url, "block", "login", "0", "--key", "mallory"]);
    assert!(code != 0 && err.contains("duration"), "{code} {err}");
    assert_eq!(once("mallory"), 0, "nothing was blocked");
    let (code, _, err) = run(&["--redis", &url, "unblock", "nope"]);
    assert!(code != 0 && err.contains("no limiter \"nope\" in the registry"), "{code} {err}");
}

/// An operator's `unblock` and `reset` from the CLI, another process, reach an application's
/// deny cache within its live poll: the application stops refusing the key from memory. (Before,
/// it kept refusing from its cache until the remembered refusal's end: here the block's 600 s,
/// or the window's hour.)
#[test]
fn the_clis_unblock_and_reset_reach_an_applications_deny_cache() {
    let server = RedisServer::start();
    let url = server.url();
    let config = ratekeeper::RedisConfig::new(url.clone()).deny_cache(true);
    let backend = ratekeeper::Backend::redis_with(config).unwrap();
    let limiter = backend.window("login", 2, Duration::from_secs(3600)).unwrap();
    assert!(limiter.check_blocking(Some("mallory"), 1).unwrap().allowed);
    backend.flush_blocking().unwrap();
    ok(&["--redis", &url, "block", "login", "600", "--key", "mallory"]);
    for _ in 0..3 {
        assert!(!limiter.check_blocking(Some("mallory"), 1).unwrap().allowed);
    }
    assert!(limiter.metrics().refused_locally >= 2, "the refusal is remembered: {:?}", limiter.metrics());
    ok(&["--redis", &url, "unblock", "login", "--key", "mallory"]);
    wait_until("the CLI's unblock to reach the application", HANG, || {
        limiter.check_blocking(Some("mallory"), 1).unwrap().allowed
    });

    assert!(!limiter.check_blocking(Some("mallory"), 1).unwrap().allowed, "the window is full");
    let remembered = limiter.metrics().refused_locally;
    assert!(!limiter.check_blocking(Some("mallory"), 1).unwrap().allowed);
    assert_eq!(limiter.metrics().refused_locally, remembered + 1);
    ok(&["--redis", &url, "reset", "login", "--key", "mallory"]);
    wait_until("the CLI's reset to reach the application", HANG, || {
        limiter.check_blocking(Some("mallory"), 1).unwrap().allowed
    });
}

/// A `ratekeeper run` in the background; a test that fails while it runs stops it (SIGTERM,
/// which `run` passes to its command) rather than leaving it behind.
struct Background(Option<std::process::Child>);

impl Background {
    fn id(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }

    fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.0.as_mut().unwrap().wait()
    }

    fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.0.as_mut().unwrap().try_wait()
    }

    fn wait_with_output(mut self) -> std::io::Result<std::process::Output> {
        self.0.take().unwrap().wait_with_output()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            if let Ok(None) = child.try_wait() {
                let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
                let _ = child.wait();
            }
        }
    }
}

/// Starts `ratekeeper run mutex -- sh -c SCRIPT` in the background.
fn spawn_run(url: &str, extra: &[&str], script: &str) -> Background {
    let child = ratekeeper()
        .args(["--redis", url, "run", "mutex"])
        .args(extra)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Background(Some(child))
}

fn exists(path: &Path) -> bool {
    path.exists()
}

#[test]
fn a_held_mutex_refuses_with_75_until_released() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = support::scratch_dir("held");
    let (held, release, ran) = (dir.join("held"), dir.join("release"), dir.join("ran"));
    let script = format!("touch {}; while [ ! -e {} ]; do sleep 0.02; done", held.display(), release.display());
    let mut holder = spawn_run(&url, &[], &script);
    wait_until("the holder to start", HANG, || exists(&held));

    let (code, _, err) = run(&["--redis", &url, "run", "mutex", "--", "touch", ran.to_str().unwrap()]);
    assert_eq!(code, 75, "{err}");
    assert!(err.contains("\"mutex\" is over its limit") && err.contains("the command was not run"), "{err}");
    assert!(!ran.exists());
    let inspected: Value = serde_json::from_str(&ok(&["--redis", &url, "inspect", "mutex", "--json"])).unwrap();
    assert_eq!((inspected["concurrent"]["held"].as_u64(), inspected["remaining"].as_u64()), (Some(1), Some(0)));
    // Another key is another mutex.
    assert_eq!(run(&["--redis", &url, "run", "mutex", "--key", "other", "--", "true"]).0, 0);

    std::fs::write(&release, "").unwrap();
    assert_eq!(holder.wait().unwrap().code(), Some(0));
    assert_eq!(run(&["--redis", &url, "run", "mutex", "--", "touch", ran.to_str().unwrap()]).0, 0, "released");
    assert!(ran.exists());
    let text = ok(&["--redis", &url, "inspect", "mutex"]);
    assert!(text.contains("holders       0\nwaiters       0\n"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn runs_of_one_mutex_never_overlap() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = support::scratch_dir("overlap");
    let log = dir.join("log");
    // Each command logs its start and end with a timestamp, with a pause between them that
    // gives an overlapping run every chance to show.
    let runs: Vec<_> = (0..4)
        .map(|i| {
            let script = format!(
                "echo start {i} $(date +%s%N) >> {log}; sleep 0.2; echo end {i} $(date +%s%N) >> {log}",
                log = log.display()
            );
            spawn_run(&url, &["--wait", "120"], &script)
        })
        .collect();
    for mut r in runs {
        let status = r.wait().unwrap();
        assert!(status.success(), "a run failed: {status}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 8, "{text}");
    let mut last_end: u128 = 0;
    for pair in lines.chunks(2) {
        // Each start is followed by its own end, and starts after the previous end.
        assert_eq!((pair[0][0], pair[1][0], pair[0][1]), ("start", "end", pair[1][1]), "overlap:\n{text}");
        let (start, end): (u128, u128) = (pair[0][2].parse().unwrap(), pair[1][2].parse().unwrap());
        assert!(last_end <= start && start <= end, "overlap:\n{text}");
        last_end = end;
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_long_command_keeps_its_lease() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = support::scratch_dir("long");
    let (held, release) = (dir.join("held"), dir.join("release"));
    // A lease reclaimable after 1 s: without renewals the second run below would take it.
    let spec = ["--spec", r#"{"kind":"concurrent","limit":1,"lock_timeout":1}"#];
    let script = format!("touch {}; while [ ! -e {} ]; do sleep 0.02; done", held.display(), release.display());
    let holder = spawn_run(&url, &spec, &script);
    wait_until("the holder to start", HANG, || exists(&held));
    let mut args = vec!["--redis", url.as_str(), "run", "mutex", "--wait", "3"];
    args.extend(spec);
    args.extend(["--", "true"]);
    let (code, _, err) = run(&args);
    assert_eq!(code, 75, "the second run got the slot of a live holder: {err}");
    std::fs::write(&release, "").unwrap();
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "no lease lost: {}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sigterm_and_sigint_reach_the_command_and_the_lease_is_released() {
    let server = RedisServer::start();
    let url = server.url();
    for (signal, code) in [("-TERM", 143), ("-INT", 130)] {
        let dir = support::scratch_dir("signal");
        let held = dir.join("held");
        let mut holder = spawn_run(&url, &[], &format!("touch {}; exec sleep 120", held.display()));
        wait_until("the holder to start", HANG, || exists(&held));
        assert_eq!(run(&["--redis", &url, "run", "mutex", "--", "true"]).0, 75);
        let kill = std::process::Command::new("kill").args([signal, &holder.id().to_string()]).status().unwrap();
        assert!(kill.success());
        // sleep dies of the signal it was passed: 128 + its number, as a shell reports it.
        let mut status = None;
        wait_until("the command to end", HANG, || {
            status = holder.try_wait().unwrap();
            status.is_some()
        });
        assert_eq!(status.unwrap().code(), Some(code), "{signal}");
        assert_eq!(run(&["--redis", &url, "run", "mutex", "--", "true"]).0, 0, "{signal}: the lease was released");
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Masks what changes from run to run in `inspect`'s text, one word at a time: durations
/// ("1.713s") become `Ns`, fencing tokens (microsecond instants) `TOKEN`, lease digests
/// (8 hex digits) `LEASE`; runs of spaces (column padding) become one.
fn mask_inspect(text: &str) -> String {
    let word = |w: &str| -> String {
        let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.');
        if w.len() > 1 && w.ends_with('s') && digits(&w[..w.len() - 1]) {
            "Ns".into()
        } else if w.len() >= 13 && w.chars().all(|c| c.is_ascii_digit()) {
            "TOKEN".into()
        } else if w.len() == 8 && w.chars().all(|c| c.is_ascii_hexdigit()) {
            "LEASE".into()
        } else {
            w.into()
        }
    };
    text.lines().map(|l| l.split_whitespace().map(word).collect::<Vec<_>>().join(" ") + "\n").collect()
}

/// `inspect` shows a concurrent key's holders (fencing tokens, ages) and waiters, the busiest
/// keys of a limiter, and the fleet's last hour, on one backend's command-line options.
fn views(backend: &[&str]) {
    let with = |args: &[&str]| -> Vec<String> { backend.iter().chain(args).map(|s| s.to_string()).collect() };
    let ok_with = |args: &[&str]| {
        let args = with(args);
        ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let dir = support::scratch_dir("views");
    let release = dir.join("release");
    let spec = r#"{"kind":"concurrent","limit":2,"lock_timeout":60}"#;
    let hold = |i: usize, extra: &[&str]| {
        let script =
            format!("touch {}/held-{i}; while [ ! -e {} ]; do sleep 0.02; done", dir.display(), release.display());
        let child = ratekeeper()
            .args(backend)
            .args(["run", "pool", "--spec", spec])
            .args(extra)
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Background(Some(child))
    };
    let mut first = hold(0, &[]);
    wait_until("the first holder", HANG, || exists(&dir.join("held-0")));
    std::thread::sleep(Duration::from_millis(50));
    let mut second = hold(1, &[]);
    wait_until("the second holder", HANG, || exists(&dir.join("held-1")));
    let mut third = hold(2, &["--wait", "120"]);
    let inspect = || -> Value { serde_json::from_str(&ok_with(&["inspect", "pool", "--json"])).unwrap() };
    wait_until("one waiter", HANG, || inspect()["concurrent"]["waiters"] == 1);

    let text = ok_with(&["inspect", "pool"]);
    let masked = mask_inspect(&text);
    let until_last_hour = masked.split("last hour").next().unwrap();
    assert_eq!(
        until_last_hour,
        "name pool\nkey -\nkind concurrent\nspec {\"kind\":\"concurrent\",\"limit\":2,\"lock_timeout\":60}\n\
         overrides -\ndeciding spec {\"kind\":\"concurrent\",\"limit\":2,\"lock_timeout\":60}\nstatus in use\n\
         conflict -\nallowed false\n\
         limit 2\nremaining 0\nretry after Ns\nreset after Ns\nholders 2\nwaiters 1\n\
         LEASE FENCING TOKEN AGE EXPIRES IN\nLEASE TOKEN Ns Ns\nLEASE TOKEN Ns Ns\n\
         busiest keys\nKEY USED LIMIT\n(own) 2 2\n",
        "{text}"
    );
    let seen = inspect();
    let holders = seen["concurrent"]["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2);
    // Oldest grant first: the older holder has the lower fencing token and the greater age.
    let (t0, t1) = (holders[0]["fencing_token"].as_u64().unwrap(), holders[1]["fencing_token"].as_u64().unwrap());
    let (a0, a1) = (holders[0]["age"].as_f64().unwrap(), holders[1]["age"].as_f64().unwrap());
    assert!(t0 < t1 && a0 > a1 + 0.04, "{holders:?}");
    assert!(holders.iter().all(|h| h["expires_in"].as_f64().unwrap() > 50.0 && h["overdue"] == false));

    std::fs::write(&release, "").unwrap();
    for holder in [&mut first, &mut second, &mut third] {
        assert_eq!(holder.wait().unwrap().code(), Some(0));
    }
    let seen = inspect();
    assert_eq!((seen["concurrent"]["held"].as_u64(), seen["concurrent"]["waiters"].as_u64()), (Some(0), Some(0)));

    // Busiest keys, most used first; a key using none of its limit is left out.
    let window = r#"{"kind":"window","limit":10,"interval":3600}"#;
    for (key, times) in [("heavy", 3), ("light", 1), ("middle", 2)] {
        for _ in 0..times {
            ok_with(&["run", "busy", "--spec", window, "--key", key, "--", "true"]);
        }
    }
    let seen: Value = serde_json::from_str(&ok_with(&["inspect", "busy", "--key", "light", "--json"])).unwrap();
    let busiest: Vec<(&str, u64)> = seen["busiest_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["key"].as_str().unwrap(), k["used"].as_u64().unwrap()))
        .collect();
    assert_eq!(busiest, [("heavy", 3), ("middle", 2), ("light", 1)]);
    let text = mask_inspect(&ok_with(&["inspect", "busy"]));
    assert!(text.contains("busiest keys\nKEY USED LIMIT\nheavy 3 10\nmiddle 2 10\nlight 1 10\n"), "{text}");

    // The last hour, per minute: every check of the runs, in the last minute or two.
    let history = seen["history"].as_array().unwrap();
    assert_eq!(history.len(), 60);
    let sum = |field: &str| history.iter().map(|m| m[field].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum("allowed"), sum("refused")), (6, 0));
    assert!(history[..58].iter().all(|m| m["allowed"] == 0));
    assert!(text.ends_with("last hour allowed 6, refused 0\n"), "{text}");
    let pool: Value = serde_json::from_str(&ok_with(&["inspect", "pool", "--json"])).unwrap();
    let pool_history = pool["history"].as_array().unwrap();
    let allowed: u64 = pool_history.iter().map(|m| m["allowed"].as_u64().unwrap()).sum();
    let refused: u64 = pool_history.iter().map(|m| m["refused"].as_u64().unwrap()).sum();
    assert!(allowed == 3 && refused >= 1, "the waiter was refused, then granted: {allowed} {refused}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn views_on_a_standalone_redis() {
    let server = RedisServer::start();
    let url = server.url();
    views(&["--redis", &url]);
}

#[test]
fn views_on_a_cluster() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seeds().join(",");
    views(&["--cluster", &seeds]);
}

/// An override set before any process used its name (ahead of a deploy) is listed as waiting,
/// `inspect` shows it, and a first user of another kind is reported (it used to be invisible:
/// `limits` listed nothing and `inspect` said the name was not in the registry).
#[test]
fn an_override_ahead_of_a_deploy_is_listed_and_inspected() {
    let server = RedisServer::start();
    let url = server.url();
    let with = |args: &[&str]| {
        let mut all = vec!["--redis", url.as_str(), "--prefix", "ahead"];
        all.extend_from_slice(args);
        ok(&all)
    };
    with(&["set", "op_x", r#"{"kind":"window","limit":7,"interval":60}"#]);
    let table = with(&["limits"]);
    let row = table.lines().find(|l| l.starts_with("op_x ")).unwrap_or_else(|| panic!("op_x not listed: {table}"));
    assert!(row.contains("window") && row.contains("waiting for a first user"), "{table}");
    let text = with(&["inspect", "op_x"]);
    assert!(text.contains("status        waiting for a first user\n") && text.contains("limit         7\n"), "{text}");

    // A first user of another kind: the override does not apply to it, and `limits` says so.
    with(&["run", "op_x", "--spec", r#"{"kind":"concurrent","limit":1}"#, "--", "true"]);
    let table = with(&["limits"]);
    assert!(!table.contains("waiting for a first user"), "{table}");
    let conflict = table.lines().find(|l| l.starts_with("conflict: op_x:")).unwrap_or_else(|| panic!("{table}"));
    assert!(conflict.contains("an override of kind window does not apply to this concurrent"), "{conflict}");
}

/// A password in a Redis URL never shows (issue #31, item 9): not in the error of a refused URL
/// (given with `--redis`, `--cluster` or RATEKEEPER_REDIS_URL), not in a wrong password's error,
/// not in what a working command prints.
#[test]
fn a_password_in_the_url_never_shows() {
    const SECRET: &str = "Pa55-w0rd-9f3e";
    let server = RedisServer::start();
    assert_eq!(server.cli(&["ACL", "SETUSER", "alice", "on", &format!(">{SECRET}"), "~*", "&*", "+@all"]), "OK");
    let port = server.url().rsplit(':').next().unwrap().to_owned();
    let refused = format!("redix://user:{SECRET}@127.0.0.1:1");
    let unschemed = format!("alice:{SECRET}@127.0.0.1:{port}");
    let wrong = format!("redis://alice:{SECRET}-wrong@127.0.0.1:{port}");
    let right = format!("redis://alice:{SECRET}@127.0.0.1:{port}");
    let mut shown = Vec::new();
    for args in [
        vec!["--redis", &refused, "limits"],
        vec!["--redis", &unschemed, "limits"],
        vec!["--cluster", "redis://127.0.0.1:1", "--cluster", &refused, "limits"],
        vec!["--redis", &wrong, "limits"],
        vec!["--redis", &wrong, "set", "secret-x", r#"{"kind":"window","limit":7,"interval":60}"#],
    ] {
        let (code, out, err) = run(&args);
        assert_eq!(code, 1, "{args:?} fails: {out}{err}");
        assert!(err.starts_with("error: "), "{err}");
        shown.push(format!("{out}{err}"));
    }
    let output = ratekeeper().env("RATEKEEPER_REDIS_URL", &refused).arg("limits").output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    shown.push(String::from_utf8_lossy(&output.stderr).into_owned());
    let (code, out, err) = run(&["--redis", &right, "set", "secret-x", r#"{"kind":"window","limit":7,"interval":60}"#]);
    assert_eq!(code, 0, "the right password works: {err}");
    shown.push(format!("{out}{err}"));
    for text in &shown {
        assert!(!text.contains(SECRET), "the password shows: {text}");
    }
    assert!(shown[0].contains("redix://***@127.0.0.1:1"), "the URL shows without its password: {}", shown[0]);
}

/// Key names come from any process with access to Redis (issue #31, item 10): `inspect` writes
/// their control characters as escapes, so a key cannot clear the operator's screen, recolour
/// it or forge a line.
#[test]
fn inspect_escapes_control_characters_in_key_names() {
    let server = RedisServer::start();
    let url = server.url();
    let hostile = "evil\u{1b}[2J\nallowed       0\u{202e}";
    let spec = r#"{"kind":"window","limit":5,"interval":60}"#;
    let (code, _, err) = run(&["--redis", &url, "run", "esc", "--spec", spec, "--key", hostile, "--", "true"]);
    assert_eq!(code, 0, "{err}");
    for args in [vec!["--redis", &url, "inspect", "esc"], vec!["--redis", &url, "inspect", "esc", "--key", hostile]] {
        let out = ok(&args);
        assert!(!out.contains('\u{1b}') && !out.contains('\u{202e}'), "raw control characters: {out:?}");
        assert!(out.contains(r"evil\u{1b}[2J\nallowed       0\u{202e}"), "the key, escaped: {out}");
        assert_eq!(out.lines().filter(|l| l.starts_with("allowed")).count(), 1, "no forged line: {out}");
    }
}
