//! The command line, declared with clap's derive API: every subcommand and flag, their help
//! texts and the rules clap enforces (values, conflicts, the environment variable).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use clap_complete::Shell;

/// Distributed rate limiting: a demo, and the operator's tools for the limiters of a fleet.
#[derive(Debug, Parser)]
#[command(name = "ratekeeper", version, propagate_version = true, arg_required_else_help = true)]
#[command(after_help = "Exit codes: 0 success (or the command's own code for `run`), 1 error, 2 bad usage, \
                        75 over the limit (`run`).")]
pub struct Cli {
    /// Where the limiters live.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The backend every subcommand talks to (global: accepted before or after the subcommand).
#[derive(Debug, Args, Clone, Default)]
pub struct BackendArgs {
    /// Redis URL (`redis://`, `rediss://`, `redis+sentinel://`, with user and password) [env:
    /// RATEKEEPER_REDIS_URL, used when none of --redis, --cluster, --sentinel is given].
    // The variable is read by `ops::connect`, not by clap: clap would count it as `--redis`, and
    // `--cluster` would then conflict with a variable set for another purpose.
    #[arg(long, global = true, value_name = "URL", conflicts_with = "cluster")]
    pub redis: Option<String>,
    /// Redis Cluster seed node URL; repeat it or give a comma-separated list.
    #[arg(long, global = true, value_name = "SEED", value_delimiter = ',', conflicts_with = "sentinel")]
    pub cluster: Vec<String>,
    /// A Sentinel-managed primary: its sentinels, `host:port`; repeat it or give a comma-separated
    /// list (with --service). `--redis redis+sentinel://…` does the same.
    #[arg(
        long,
        global = true,
        value_name = "HOST:PORT",
        value_delimiter = ',',
        requires = "service",
        conflicts_with = "redis"
    )]
    pub sentinel: Vec<String>,
    /// The name the sentinels know the primary by (with --sentinel).
    #[arg(long, global = true, value_name = "NAME", requires = "sentinel")]
    pub service: Option<String>,
    /// Key prefix (namespace) of the limiters: the one the processes were given, or the
    /// library's default.
    // The default is the core's constant (one source), so the help cannot name another.
    #[arg(long, global = true, value_name = "PREFIX", default_value = ratekeeper::DEFAULT_PREFIX)]
    pub prefix: Option<String>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ingest records into a simulated throttled service, naively and through a ratekeeper
    /// limiter, and compare the traffic (the Azure rate limiting pattern). Memory backend unless
    /// `--redis` is given.
    Demo(DemoArgs),
    /// List the registry: every limiter any process used, with its overrides and fleet counts.
    Limits {
        /// Print JSON (each spec as JSON) instead of a table (each spec in words).
        #[arg(long)]
        json: bool,
    },
    /// Show a limiter's state for one key (peek: consumes nothing), its spec and overrides; a
    /// concurrent key's holders (lease digest, fencing token, age) and waiters; the busiest keys;
    /// allowed and refused per minute over the last hour.
    Inspect {
        /// The limiter's name.
        name: String,
        /// The key: `NAME KEY` or `--key KEY`; none for the limiter's own key.
        #[command(flatten)]
        key: KeyArg,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Override a limiter's spec (or one key's) in every process, within a second.
    Set {
        /// The limiter's name.
        name: String,
        /// The new spec as JSON, e.g. '{"kind":"window","limit":200,"interval":60}'.
        spec: String,
        /// The key: `NAME KEY` or `--key KEY`; none for the limiter's own key.
        #[command(flatten)]
        key: KeyArg,
    },
    /// Remove an override: the limiter (or key) goes back to the spec in the code.
    Unset {
        /// The limiter's name.
        name: String,
        /// The key: `NAME KEY` or `--key KEY`; none for the limiter's own key.
        #[command(flatten)]
        key: KeyArg,
    },
    /// Forget a limiter's state for one key (its counts, tokens or holders).
    Reset {
        /// The limiter's name (it must be in the registry: its spec says what to reset).
        name: String,
        /// The key: `NAME KEY` or `--key KEY`; none for the limiter's own key.
        #[command(flatten)]
        key: KeyArg,
    },
    /// End a pause early (one that `pause` or `observe` wrote after a third party's 429 or
    /// 503), in every process; the key's other state is kept.
    Resume {
        /// The limiter's name (it must be in the registry).
        name: String,
        /// The key: `NAME KEY` or `--key KEY`; none for the limiter's own key.
        #[command(flatten)]
        key: KeyArg,
    },
    /// Block a key for SECONDS, in every process: its checks are refused until the block ends
    /// (or `unblock`, or `reset`), consuming nothing. Replaces a block in effect.
    Block {
        /// The limiter's name (it must be in the registry).
        name: String,
        /// How long, in seconds (fractions allowed).
        seconds: f64,
        /// The key: `NAME KEY` or `--key KEY`; none for the limiter's own key.
        #[command(flatten)]
        key: KeyArg,
    },
    /// End a block early (one that `block` or a limiter's `block_for` wrote), in every process;
    /// the key's other state, and a pause, are kept.
    Unblock {
        /// The limiter's name (it must be in the registry).
        name: String,
        /// The key: `NAME KEY` or `--key KEY`; none for the limiter's own key.
        #[command(flatten)]
        key: KeyArg,
    },
    /// Remove a limiter from the registry (`limits`, the page): for a limiter no process uses
    /// any more. Its state and overrides are left alone; a process that still uses it
    /// registers it again.
    Forget {
        /// The limiter's name.
        name: String,
    },
    /// Run a command under a fleet-wide limit: by default a mutex (a concurrent limiter of 1).
    ///
    /// Exits with the command's exit code, 75 when the limit stays reached for `--wait`
    /// seconds, 1 when the backend fails. SIGINT and SIGTERM are passed to the command, and the
    /// lease is released when it ends.
    Run(RunArgs),
    /// Serve the Limits page, a JSON API and Prometheus `/metrics` over HTTP.
    Serve(ServeArgs),
    /// Print a shell completion script (e.g. `ratekeeper completions bash > /etc/bash_completion.d/ratekeeper`).
    Completions {
        /// The shell.
        shell: Shell,
    },
    /// Write the man pages (ratekeeper.1 and one per subcommand) into DIR: what the C tarball
    /// ships in share/man/man1, for installs from the other packages.
    #[command(name = "man-pages")]
    ManPages {
        /// The directory to write them into (created if missing).
        dir: PathBuf,
    },
}

/// A key given after the name, as the page shows it (`inspect api tenant-7`), or as `--key`.
#[derive(Debug, Args, Clone, Default)]
pub struct KeyArg {
    /// The key (a tenant, a user id).
    #[arg(value_name = "KEY", conflicts_with = "key_flag")]
    positional: Option<String>,
    /// The key, as a flag (the same as the positional KEY).
    #[arg(long = "key", id = "key_flag", value_name = "KEY")]
    flag: Option<String>,
}

impl KeyArg {
    /// The key, however it was given.
    pub fn get(&self) -> Option<&str> {
        self.positional.as_deref().or(self.flag.as_deref())
    }
}

/// `ratekeeper demo`'s options. The defaults are the numbers of the Azure story.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Records to ingest.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub records: u64,
    /// Concurrent workers (tokio tasks).
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub workers: usize,
    /// Units the service accepts per window.
    #[arg(long, value_name = "UNITS", default_value_t = 20_000)]
    pub capacity: u64,
    /// Units one record costs.
    #[arg(long, value_name = "UNITS", default_value_t = 10)]
    pub cost: u64,
    /// Length of the service's throttling window, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub window_ms: u64,
    /// Run the ratekeeper client as this many OS processes sharing leased partitions of the
    /// service's rate on Redis (needs --redis or --cluster); the naive run is skipped.
    #[arg(long, value_name = "N")]
    pub processes: Option<usize>,
    /// Partitions the service's rate is split into (with --processes).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub partitions: u64,
    /// Lease TTL of a partition in milliseconds (with --processes).
    #[arg(long, value_name = "MS", default_value_t = 1500)]
    pub lease_ttl_ms: u64,
    /// Internal: run as one worker process of `--processes`, talking to the service at ADDR.
    #[arg(long, value_name = "ADDR", hide = true)]
    pub fleet_worker: Option<SocketAddr>,
}

/// `ratekeeper run`'s options.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The limiter's name.
    pub name: String,
    /// The key to take the slot of (e.g. one mutex per resource).
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Seconds to wait for the limit before giving up with exit code 75 (0: do not wait).
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    pub wait: f64,
    /// The limiter's spec as JSON [default: {"kind":"concurrent","limit":1,"lock_timeout":60}].
    #[arg(long, value_name = "SPEC_JSON")]
    pub spec: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `ratekeeper serve`'s options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; loopback by default, so nothing is exposed without a decision.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9090")]
    pub listen: SocketAddr,
    /// Bearer token that allows resets and overrides; without one the server is read-only.
    #[arg(long, value_name = "TOKEN", env = "RATEKEEPER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A host name requests may use besides the listen address and loopback names (e.g. the
    /// name a reverse proxy forwards as Host); repeatable. Requests naming any other host are
    /// refused, so a web page cannot read this server through DNS rebinding.
    #[arg(long = "allow-host", value_name = "HOST", value_parser = crate::serve_guard::validate_allowed_host)]
    pub allow_host: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn cluster_seeds_repeat_or_split_on_commas() {
        let cli = Cli::try_parse_from(["ratekeeper", "--cluster", "redis://a:1,redis://b:2", "limits"]).unwrap();
        assert_eq!(cli.backend.cluster, ["redis://a:1", "redis://b:2"]);
        let cli = Cli::try_parse_from(["ratekeeper", "limits", "--cluster", "redis://a:1", "--cluster", "redis://b:2"])
            .unwrap();
        assert_eq!(cli.backend.cluster, ["redis://a:1", "redis://b:2"]);
    }

    #[test]
    fn run_takes_the_command_after_the_double_dash() {
        let cli =
            Cli::try_parse_from(["ratekeeper", "run", "job", "--wait", "2.5", "--", "sh", "-c", "exit 3"]).unwrap();
        let Command::Run(run) = cli.command else { panic!("not run") };
        assert_eq!((run.name.as_str(), run.wait), ("job", 2.5));
        assert_eq!(run.command, ["sh", "-c", "exit 3"]);
        assert!(Cli::try_parse_from(["ratekeeper", "run", "job"]).is_err());
    }

    #[test]
    fn sentinels_repeat_or_split_on_commas_and_need_a_service() {
        let cli = Cli::try_parse_from(["ratekeeper", "--sentinel", "a:1,b:2", "--service", "s", "limits"]).unwrap();
        assert_eq!(
            (cli.backend.sentinel, cli.backend.service.as_deref()),
            (vec!["a:1".into(), "b:2".into()], Some("s"))
        );
        assert!(Cli::try_parse_from(["ratekeeper", "--sentinel", "a:1", "limits"]).is_err(), "no --service");
        assert!(Cli::try_parse_from(["ratekeeper", "--service", "s", "limits"]).is_err(), "no --sentinel");
        let both = ["ratekeeper", "--sentinel", "a:1", "--service", "s", "--cluster", "redis://c:1", "limits"];
        assert!(Cli::try_parse_from(both).is_err());
    }

    #[test]
    fn redis_and_cluster_conflict_only_when_both_are_given() {
        assert!(
            Cli::try_parse_from(["ratekeeper", "--redis", "redis://x", "--cluster", "redis://y", "limits"]).is_err()
        );
    }
}
