//! `bench-pause`: what the pause check (see `Limiter::pause`) adds to the Redis server's time
//! per call, from `INFO commandstats` (`usec_per_call` of EVALSHA), in one run on one server.
//!
//! ```text
//! cargo run --release -p ratekeeper-bench --bin bench-pause            # 20,000 checks per row
//! cargo run --release -p ratekeeper-bench --bin bench-pause -- 50000   # N checks per row
//! ```
//!
//! Three scripts run the same GCRA checks (server TIME, pipelined 500 at a time, one key that
//! always admits): `without pause check` is the GCRA script with the pause check cut out (what
//! every call ran before pauses existed), `with pause check` is the script as shipped (its hold
//! check: one EXISTS of the pause and block keys, both missing), `paused` is the shipped script on
//! a paused key (the refusal that skips the engine). The rows alternate for `ROUNDS` rounds and each row reports its median.
//!
//! The benchmark starts its own `redis-server` on a free loopback port (never 6379, no
//! persistence) and stops it by pid at the end.

use ratekeeper_bench::report::{Report, Row};
use ratekeeper_bench::server::Server;

const ROUNDS: usize = 5;
const PIPELINE: u64 = 500;

/// The shipped GCRA script with its pause check cut out: the block from the pause check's first
/// line to the first unindented `end` after it.
fn without_pause_check(body: &str) -> String {
    let start = body.find("if ARGV[1] == 'check' or ARGV[1] == 'peek' then").expect("the pause check");
    let end = start + body[start..].find("\nend\n").expect("the pause check's end") + "\nend\n".len();
    format!("{}{}", &body[..start], &body[end..])
}

/// Runs `checks` GCRA checks of script `sha` with `keys`, returns `usec_per_call` of EVALSHA.
fn measure(conn: &mut redis::Connection, sha: &str, keys: &[&str], checks: u64) -> f64 {
    redis::cmd("CONFIG").arg("RESETSTAT").query::<()>(conn).expect("CONFIG RESETSTAT");
    let mut done = 0;
    while done < checks {
        let mut pipe = redis::pipe();
        for _ in 0..PIPELINE.min(checks - done) {
            // check, server TIME, 1 µs ticks, 1 µs per unit, a burst of 2^40, cost 1.
            pipe.cmd("EVALSHA").arg(sha).arg(keys.len()).arg(keys);
            pipe.arg("check").arg("").arg(1000).arg(1).arg(1u64 << 40).arg(1u64 << 40).arg(1).arg(0).ignore();
            done += 1;
        }
        pipe.query::<()>(conn).expect("EVALSHA");
    }
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).expect("INFO commandstats");
    let line = info.lines().find(|l| l.starts_with("cmdstat_evalsha:")).expect("EVALSHA ran");
    let field = |name: &str| line.split([':', ',']).find_map(|kv| kv.strip_prefix(name)).map(str::to_owned);
    assert_eq!(field("calls=").as_deref(), Some(checks.to_string().as_str()), "one EVALSHA per check");
    assert_eq!(field("failed_calls=").as_deref(), Some("0"), "{line}");
    field("usec_per_call=").and_then(|v| v.parse().ok()).expect("usec_per_call")
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let checks: u64 = std::env::args().nth(1).map(|n| n.parse().expect("N checks")).unwrap_or(20_000);
    let server = Server::start();
    let mut conn = server.connection().expect("connect");
    let (_, shipped) = ratekeeper::lua_sources().into_iter().find(|(name, _)| *name == "gcra").expect("gcra");
    let before = without_pause_check(shipped);
    let load = |conn: &mut redis::Connection, body: &str| -> String {
        redis::cmd("SCRIPT").arg("LOAD").arg(body).query(conn).expect("SCRIPT LOAD")
    };
    let (sha_before, sha_after) = (load(&mut conn, &before), load(&mut conn, shipped));
    // The paused row's key: a pause for an hour from now, as `hold.lua` writes it.
    let time: (String, String) = redis::cmd("TIME").query(&mut conn).expect("TIME");
    let until = time.0.parse::<u64>().unwrap() * 1_000_000 + 3_600_000_000;
    redis::cmd("SET").arg("{b}:paused").arg(until).arg("PX").arg(3_600_000).query::<()>(&mut conn).expect("SET");

    let rows: [(&str, &str, &[&str]); 3] = [
        ("without pause check", &sha_before, &["{b}:s"]),
        ("with pause check (not paused)", &sha_after, &["{b}:s", "{b}:p", "{b}:bk"]),
        ("with pause check (paused)", &sha_after, &["{b}:s", "{b}:paused", "{b}:bk"]),
    ];
    let mut results = vec![Vec::new(); rows.len()];
    for _ in 0..ROUNDS {
        for (i, (_, sha, keys)) in rows.iter().enumerate() {
            results[i].push(measure(&mut conn, sha, keys, checks));
        }
    }
    println!("| script | checks per round | rounds | server µs per call (EVALSHA, median) |");
    println!("|---|---:|---:|---:|");
    let mut report = Report::new(
        "bench-pause",
        "Redis",
        "Server time of the GCRA script with and without the pause check (INFO commandstats)",
        "cargo run --release -p ratekeeper-bench --bin bench-pause",
    )
    .method(format!("{checks} pipelined checks per round, {ROUNDS} alternating rounds, medians"));
    for ((name, _, _), values) in rows.iter().zip(results) {
        let usec = median(values);
        println!("| {name} | {checks} | {ROUNDS} | {usec:.3} |");
        report.row(Row::figure(*name, "server µs per call", usec));
    }
    report.write();
}
