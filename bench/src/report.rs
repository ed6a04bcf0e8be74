//! The JSON a benchmark run leaves in `bench/results/`, from which `bench/render.py` renders the
//! tables of the docs' benchmarks page and the README (so no figure is copied by hand).
//!
//! One file per benchmark, `bench/results/<bench>.json`, replaced by each run: the scenarios'
//! rows (ratekeeper's figure, the peer's in the same run, their ratio and the target) and what
//! the run ran on (date, git commit, load average from `/proc/loadavg`, CPU count, quick or full).

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

/// One scenario of a run: ratekeeper's figure and, when there is one, a peer's from the same run.
pub struct Row {
    /// What was measured, in words.
    pub scenario: String,
    /// The unit of `ratekeeper` and `peer_value` (e.g. `checks/s`, `µs per call`).
    pub unit: &'static str,
    /// ratekeeper's figure (a same-run median).
    pub ratekeeper: f64,
    /// The peer or floor it is compared with (`governor`, `redis-benchmark`), if any.
    pub peer: Option<String>,
    /// The peer's figure in the same run.
    pub peer_value: Option<f64>,
    /// The target, in words (`≥ 1.0× governor`), if the scenario has one.
    pub target: Option<String>,
    /// The least ratio that meets the target (ratio = ratekeeper / peer; for times, peer / ratekeeper).
    pub target_ratio: Option<f64>,
    /// Whether a larger figure is better (rates) or a smaller one (times).
    pub higher_is_better: bool,
    /// The row the README's one-line summary of this area shows.
    pub headline: bool,
}

impl Row {
    /// A throughput row compared with a peer in the same run.
    pub fn rate(scenario: impl Into<String>, ratekeeper: f64, peer: &str, peer_value: f64) -> Row {
        Row {
            scenario: scenario.into(),
            unit: "checks/s",
            ratekeeper,
            peer: Some(peer.to_owned()),
            peer_value: Some(peer_value),
            target: None,
            target_ratio: None,
            higher_is_better: true,
            headline: false,
        }
    }

    /// A figure with no peer (a latency, a server time).
    pub fn figure(scenario: impl Into<String>, unit: &'static str, value: f64) -> Row {
        Row {
            scenario: scenario.into(),
            unit,
            ratekeeper: value,
            peer: None,
            peer_value: None,
            target: None,
            target_ratio: None,
            higher_is_better: false,
            headline: false,
        }
    }

    /// Sets the target: the least ratio that meets it.
    pub fn target(mut self, ratio: f64) -> Row {
        self.target_ratio = Some(ratio);
        self.target = Some(format!("≥ {ratio:.2}"));
        self
    }

    /// Marks the row as the area's headline in the README.
    pub fn headline(mut self) -> Row {
        self.headline = true;
        self
    }

    /// Sets the unit.
    pub fn unit(mut self, unit: &'static str) -> Row {
        self.unit = unit;
        self
    }

    fn ratio(&self) -> Option<f64> {
        let peer = self.peer_value?;
        let ratio = if self.higher_is_better { self.ratekeeper / peer } else { peer / self.ratekeeper };
        ratio.is_finite().then_some(ratio)
    }

    fn to_json(&self) -> Value {
        let ratio = self.ratio();
        json!({
            "scenario": self.scenario,
            "unit": self.unit,
            "ratekeeper": self.ratekeeper,
            "peer": self.peer,
            "peer_value": self.peer_value,
            "ratio": ratio.map(|r| (r * 1000.0).round() / 1000.0),
            "target": self.target,
            "target_ratio": self.target_ratio,
            "met": match (ratio, self.target_ratio) { (Some(r), Some(t)) => Some(r >= t), _ => None },
            "headline": self.headline,
        })
    }
}

/// A benchmark run's results, written to `bench/results/<bench>.json`.
pub struct Report {
    bench: &'static str,
    area: &'static str,
    title: String,
    command: String,
    method: String,
    quick: bool,
    rows: Vec<Row>,
}

impl Report {
    /// A report of `bench` (the file's name) in `area` (the README's row: Redis, memory, leased,
    /// ...), run by `command`.
    pub fn new(
        bench: &'static str,
        area: &'static str,
        title: impl Into<String>,
        command: impl Into<String>,
    ) -> Report {
        let quick = std::env::args().any(|a| a == "--quick");
        Report {
            bench,
            area,
            title: title.into(),
            command: command.into(),
            method: String::new(),
            quick,
            rows: Vec::new(),
        }
    }

    /// How the figures were taken (rounds, shape), one sentence for the table's caption.
    pub fn method(mut self, method: impl Into<String>) -> Report {
        self.method = method.into();
        self
    }

    /// Adds a row.
    pub fn row(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// Writes the JSON (and says where on stderr). A bench that cannot write its results fails.
    pub fn write(&self) {
        let dir = std::env::var_os("BENCH_RESULTS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results"));
        std::fs::create_dir_all(&dir).expect("create the results directory");
        let path = dir.join(format!("{}.json", self.bench));
        let doc = json!({
            "bench": self.bench,
            "area": self.area,
            "language": "Rust",
            "title": self.title,
            "command": self.command,
            "method": self.method,
            "quick": self.quick,
            "machine": machine(),
            "rows": self.rows.iter().map(Row::to_json).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&doc).expect("serialize the results") + "\n";
        std::fs::write(&path, text).expect("write the results");
        eprintln!("results written to {}", path.display());
    }
}

/// Date, commit, load average and CPU count of this run.
fn machine() -> Value {
    let load: Vec<f64> = std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .filter_map(|v| v.parse().ok())
        .collect();
    let date = Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ"]).output().ok();
    let commit =
        Command::new("git").args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--short", "HEAD"]).output().ok();
    let text = |out: Option<std::process::Output>| {
        out.filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    json!({
        "date": text(date),
        "commit": text(commit),
        "load": load,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    })
}
