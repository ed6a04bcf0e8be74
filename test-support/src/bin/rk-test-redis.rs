//! `rk-test-redis`: the test fixtures' Redis servers and over-admission judge, for the suites
//! that are not Rust (Python, Node, Ruby).
//!
//! - `start [--cluster | --tls | --tls-certs DIR] [--json] [-- REDIS_ARGS…]` starts a standalone
//!   server (or a 3-master Cluster, or a TLS-only server) on free loopback ports, never 6379,
//!   (`--sentinel`: a Sentinel group, see `SentinelGroup`) and prints where each server is: its port, pid, URL, directory, arguments (and CA). The
//!   servers keep running after this process exits.
//! - `launch --dir DIR --json -- REDIS_ARGS…` starts a stopped server again, with the arguments
//!   and directory `start` printed, on the same port.
//! - `stop [--keep-dir] PID…` stops servers by pid (SIGKILL, as the Rust fixture does), waits
//!   until they are gone, and removes their scratch directories.
//! - `judge` reads judge cases (JSON, see `ratekeeper_test_support::judge::Case`) on stdin and
//!   prints one verdict per case: `null`, or the first excess found.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use ratekeeper_test_support::judge::{judge_all, Case};
use ratekeeper_test_support::ports::SCRATCH_PREFIX;
use ratekeeper_test_support::{DetachedServer, RedisCluster, RedisServer, SentinelGroup};

#[derive(Parser)]
#[command(about = "Real Redis servers for ratekeeper's tests, and the over-admission judge")]
struct Cli {
    #[command(subcommand)]
    command: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Starts a standalone server, a 3-master Cluster or a TLS-only server, and prints where.
    Start {
        /// Three cluster-enabled masters joined into one Cluster.
        #[arg(long, conflicts_with_all = ["tls", "tls_certs", "sentinel"])]
        cluster: bool,
        /// A Sentinel group: a primary, two replicas, three sentinels (down-after 1 s), printed
        /// in that order; the sentinels' arguments include `--sentinel`.
        #[arg(long, conflicts_with_all = ["tls", "tls_certs"])]
        sentinel: bool,
        /// TLS only, with certificates from a fresh CA (printed as `ca`).
        #[arg(long)]
        tls: bool,
        /// TLS only, with the certificates in DIR (ca.crt, server.crt, server.key).
        #[arg(long, value_name = "DIR")]
        tls_certs: Option<PathBuf>,
        /// Prints JSON (`{"servers": [...]}`) rather than one `port pid url` line per server.
        #[arg(long)]
        json: bool,
        /// More redis-server arguments (standalone servers only).
        #[arg(last = true)]
        redis_args: Vec<String>,
    },
    /// Starts a stopped server again, on its port, with the arguments `start` printed.
    Launch {
        /// The server's directory, as `start` printed it.
        #[arg(long)]
        dir: PathBuf,
        /// Prints JSON rather than a `port pid url` line.
        #[arg(long)]
        json: bool,
        /// The server's arguments, as `start` printed them.
        #[arg(last = true, required = true)]
        redis_args: Vec<String>,
    },
    /// Stops servers by pid and removes their scratch directories.
    Stop {
        /// Leaves the directories (for `launch` to start the server again).
        #[arg(long)]
        keep_dir: bool,
        pids: Vec<u32>,
    },
    /// Judges admissions read as JSON on stdin; prints a JSON list of verdicts.
    Judge,
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("rk-test-redis: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(action: Action) -> Result<(), String> {
    match action {
        Action::Start { cluster, sentinel, tls, tls_certs, json, redis_args } => {
            if (cluster || sentinel) && !redis_args.is_empty() {
                return Err("--cluster and --sentinel take no redis-server arguments".into());
            }
            let servers = if cluster {
                RedisCluster::start().detach()
            } else if sentinel {
                SentinelGroup::start().detach()
            } else if let Some(certs) = tls_certs {
                vec![RedisServer::start_tls_with(&certs).detach()]
            } else if tls {
                vec![RedisServer::start_tls().detach()]
            } else {
                vec![RedisServer::start_with(&redis_args).detach()]
            };
            print_servers(&servers, json);
            Ok(())
        }
        Action::Launch { dir, json, redis_args } => {
            let server = RedisServer::relaunch(&dir, redis_args)?.detach();
            print_servers(&[server], json);
            Ok(())
        }
        Action::Stop { keep_dir, pids } => pids.into_iter().try_for_each(|pid| stop(pid, keep_dir)),
        Action::Judge => {
            let mut input = String::new();
            std::io::stdin().read_to_string(&mut input).map_err(|e| format!("reading stdin: {e}"))?;
            let cases: Vec<Case> = serde_json::from_str(&input).map_err(|e| format!("judge cases: {e}"))?;
            let verdicts: Vec<Option<String>> = judge_all(&cases).into_iter().map(Result::err).collect();
            println!("{}", serde_json::to_string(&verdicts).expect("verdicts serialize"));
            Ok(())
        }
    }
}

fn print_servers(servers: &[DetachedServer], json: bool) {
    if json {
        println!("{}", serde_json::json!({ "servers": servers }));
    } else {
        for s in servers {
            println!("{} {} {}", s.port, s.pid, s.url);
        }
    }
}

/// How long a SIGKILLed server has to disappear.
const STOP_GIVE_UP: Duration = Duration::from_secs(10);

/// SIGKILLs `pid` if it is a redis-server (a pid reused by another process is left alone),
/// waits until it is gone, and removes its scratch directory (its working directory).
fn stop(pid: u32, keep_dir: bool) -> Result<(), String> {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let Ok(comm) = std::fs::read_to_string(proc_dir.join("comm")) else {
        return Ok(()); // already gone
    };
    if gone(&proc_dir) {
        return Ok(());
    }
    if comm.trim() != "redis-server" {
        return Err(format!("pid {pid} is {}, not a redis-server", comm.trim()));
    }
    let dir = std::fs::read_link(proc_dir.join("cwd")).ok();
    // A stopped (SIGSTOP) server is continued first, as the Rust fixture's drop does.
    for signal in ["-CONT", "-KILL"] {
        let _ = Command::new("kill").args([signal, &pid.to_string()]).status();
    }
    let start = Instant::now();
    while !gone(&proc_dir) {
        if start.elapsed() > STOP_GIVE_UP {
            return Err(format!("redis-server {pid} did not exit after SIGKILL"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(dir) = dir.filter(|d| !keep_dir && is_scratch(d)) {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(())
}

/// Whether the process has exited: no longer listed, or a zombie nobody has reaped yet (its
/// parent, this tool's caller's reaper, may never reap it) whose other threads have exited too
/// (until the last one has, its sockets, and so its port, are still open).
fn gone(proc_dir: &Path) -> bool {
    let zombie = match std::fs::read_to_string(proc_dir.join("stat")) {
        Err(_) => return true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    };
    zombie && std::fs::read_dir(proc_dir.join("task")).map_or(true, |threads| threads.count() <= 1)
}

/// Whether `dir` is a scratch directory of the fixtures (only those are removed).
fn is_scratch(dir: &Path) -> bool {
    dir.parent() == Some(std::env::temp_dir().as_path())
        && dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(SCRATCH_PREFIX))
}
