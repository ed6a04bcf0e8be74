//! `ratekeeper demo`: the ingestion story of the Azure rate limiting pattern.
//!
//! A simulated throttled service (Cosmos DB in the story: 20,000 RU/s provisioned, 10 RU per
//! record) receives 10,000 records from several concurrent workers, twice:
//!
//! 1. **naive**: every worker sends all its remaining records at once and retries the refused
//!    ones after the service's Retry-After. The service accepts 2,000 records per second, so the
//!    passes send 10k, 8k, 6k, 4k and 2k records: about three sends per record.
//! 2. **ratekeeper**: the workers share one token bucket paced just under the service's capacity
//!    and wait for a token before each send: about one send per record, almost no throttling,
//!    and a duration that can be predicted from the rate.
//!
//! The service is implemented here with a mutex and counters, independently of ratekeeper, so
//! that the demo does not grade ratekeeper with itself.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ratekeeper::{Backend, Error, Limiter};

/// The demo's parameters. The defaults are the numbers of the Azure story.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Records to ingest.
    pub records: u64,
    /// Concurrent workers (tokio tasks), each owning a slice of the records.
    pub workers: usize,
    /// Units the service accepts per window (the story's 20,000 RU per second).
    pub capacity: u64,
    /// Units one record costs (the story's 10 RU).
    pub cost: u64,
    /// The service's throttling window (one second in the story).
    pub window: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { records: 10_000, workers: 8, capacity: 20_000, cost: 10, window: Duration::from_secs(1) }
    }
}

impl From<&crate::cli::DemoArgs> for Config {
    fn from(args: &crate::cli::DemoArgs) -> Config {
        Config {
            records: args.records,
            workers: args.workers,
            capacity: args.capacity,
            cost: args.cost,
            window: Duration::from_millis(args.window_ms),
        }
    }
}

impl Config {
    /// Rejects configurations that could never finish or that the limiter cannot represent.
    pub fn validate(&self) -> Result<(), String> {
        if self.records == 0 {
            return Err("`--records` must be at least 1".into());
        }
        if !(1..=10_000).contains(&self.workers) {
            return Err("`--workers` must be between 1 and 10000".into());
        }
        if self.cost == 0 {
            return Err("`--cost` must be at least 1".into());
        }
        // A record that costs more than a whole window could never be written.
        if self.capacity < self.cost {
            return Err(format!("`--capacity` ({}) must be at least `--cost` ({})", self.capacity, self.cost));
        }
        if self.window < Duration::from_millis(10) || self.window > Duration::from_secs(3600) {
            return Err("`--window-ms` must be between 10 and 3600000".into());
        }
        if self.records_per_window() as f64 / self.window.as_secs_f64() > 1e6 {
            return Err(
                "the service would accept more than 1,000,000 records per second; lower `--capacity` or raise `--cost`"
                    .into(),
            );
        }
        Ok(())
    }

    /// Records the service accepts per window.
    pub fn records_per_window(&self) -> u64 {
        self.capacity / self.cost
    }

    /// The token bucket the paced client uses: (tokens per second, burst).
    ///
    /// A token bucket admits at most `burst + rate * span` calls in any span, so choosing
    /// `burst + rate * window = records_per_window` means no window of the service can ever see
    /// more than it accepts. The burst is kept small (5% of a window) so the rest is spread
    /// evenly: Azure's advice of sending smaller amounts more often. For the story this is
    /// 1,900 records/s with a burst of 100.
    pub fn pacing(&self) -> (f64, u64) {
        let per_window = self.records_per_window();
        let burst = (per_window / 20).max(1);
        // With one record per window the burst takes all of it; pace slightly slower instead.
        let paced = if per_window > burst { (per_window - burst) as f64 } else { 0.95 };
        (paced / self.window.as_secs_f64(), burst)
    }
}

/// What one client run did, as counted by the service.
#[derive(Debug, Clone)]
pub struct RunStats {
    /// The client's name, shown in the table.
    pub name: &'static str,
    /// Records the service accepted.
    pub written: u64,
    /// Requests the service received (accepted or throttled).
    pub sends: u64,
    /// Requests the service refused.
    pub throttled: u64,
    /// Time from the first send to the last record written.
    pub elapsed: Duration,
}

impl RunStats {
    /// Requests per record written; 1.0 is the ideal.
    pub fn sends_per_record(&self) -> f64 {
        self.sends as f64 / self.written.max(1) as f64
    }
}

/// Runs the whole demo on the process-wide runtime, printing the table row by row; the paced
/// client's token bucket lives on `backend` (memory unless the user gave `--redis`).
pub fn run(config: &Config, backend: &Backend) -> Result<(), Error> {
    let (rate, burst) = config.pacing();
    println!(
        "Simulated service: {} units per {} window, {} units per record = {} records per window.",
        thousands(config.capacity),
        format_duration(config.window),
        thousands(config.cost),
        thousands(config.records_per_window()),
    );
    println!("Ingesting {} records with {} concurrent workers, twice:", thousands(config.records), config.workers);
    println!("  naive       send everything, retry what is throttled after Retry-After");
    println!(
        "  ratekeeper  wait for a shared token_bucket(\"ingest\", {}/s, burst {}) before each send",
        thousands(rate.round() as u64),
        thousands(burst)
    );
    println!();
    println!("{}", table_header());
    ratekeeper::runtime().block_on(async {
        let naive = run_naive(config).await;
        println!("{}", table_row(&naive));
        let paced = run_paced(config, backend).await?;
        println!("{}", table_row(&paced));
        println!();
        println!(
            "ratekeeper sent {} fewer requests and got {} throttled responses instead of {}.",
            thousands(naive.sends.saturating_sub(paced.sends)),
            thousands(paced.throttled),
            thousands(naive.throttled),
        );
        println!(
            "Its duration is predictable from the rate: {} records at {}/s take about {}.",
            thousands(config.records),
            thousands(rate.round() as u64),
            format_duration(predicted_duration(config)),
        );
        println!("(The naive run only looks quick because refusals cost the simulated service nothing.)");
        Ok(())
    })
}

/// How long the paced run should take: the burst goes at once, the rest at the paced rate.
fn predicted_duration(config: &Config) -> Duration {
    let (rate, burst) = config.pacing();
    Duration::from_secs_f64(config.records.saturating_sub(burst) as f64 / rate)
}

/// The simulated throttled service.
///
/// Fixed windows aligned to the wall clock (like Cosmos DB's per-second RU budget): a window
/// accepts `capacity` units, and a send that does not fit is refused with the time until the
/// next window, like an HTTP 429 with Retry-After. A plain mutex and counters, on purpose
/// independent of ratekeeper.
pub(crate) mod service {
    use super::*;

    /// Why a send was refused: come back after `retry_after`.
    #[derive(Debug)]
    pub struct Throttled {
        pub retry_after: Duration,
    }

    pub struct Service {
        capacity: u64,
        window_us: u64,
        state: Mutex<State>,
    }

    #[derive(Default)]
    struct State {
        /// Index of the current window since the epoch.
        window: u64,
        /// Units used in the current window.
        used: u64,
        sends: u64,
        throttled: u64,
    }

    impl Service {
        pub fn new(capacity: u64, window: Duration) -> Service {
            Service { capacity, window_us: window.as_micros() as u64, state: Mutex::new(State::default()) }
        }

        /// Tries to write one record of `cost` units.
        pub fn send(&self, cost: u64) -> Result<(), Throttled> {
            self.send_at(cost, None)
        }

        /// Tries to write one record of `cost` units sent at `sent_us` (µs since the epoch;
        /// `None`: now). The multi-process demo counts a request in the window its sender sent
        /// it in, as if the network took no time: a request that a busy machine delivers late
        /// would otherwise land in the next window.
        pub fn send_at(&self, cost: u64, sent_us: Option<u64>) -> Result<(), Throttled> {
            let mut state = self.state.lock().unwrap();
            // Read the clock under the lock so windows are seen in order by every caller.
            let now = sent_us.unwrap_or_else(now_us);
            // Never go back to an older window, even if the wall clock steps back.
            let window = (now / self.window_us).max(state.window);
            if window != state.window {
                state.window = window;
                state.used = 0;
            }
            state.sends += 1;
            if state.used + cost <= self.capacity {
                state.used += cost;
                Ok(())
            } else {
                state.throttled += 1;
                let next = (window + 1) * self.window_us;
                Err(Throttled { retry_after: Duration::from_micros(next.saturating_sub(now).max(1)) })
            }
        }

        /// (requests received, requests throttled).
        pub fn counts(&self) -> (u64, u64) {
            let state = self.state.lock().unwrap();
            (state.sends, state.throttled)
        }
    }

    /// Microseconds since the epoch: the service's windows follow the wall clock.
    pub fn now_us() -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
    }

    /// Sleeps until the next window starts, so that every run begins with a fresh window and
    /// the numbers do not depend on where in the second the demo was launched.
    pub async fn next_window(window: Duration) {
        let window_us = window.as_micros() as u64;
        let now = now_us();
        let next = (now / window_us + 1) * window_us;
        // tokio rounds sleeps up to the millisecond, so this wakes just after the boundary.
        tokio::time::sleep(Duration::from_micros(next - now)).await;
    }
}

use service::{Service, Throttled};

/// The records worker `index` of `workers` owns (round-robin, so slices differ by at most one).
fn slice(records: u64, workers: usize, index: usize) -> Vec<u64> {
    (index as u64..records).step_by(workers).collect()
}

/// Runs `workers` tasks of `work`, one per slice, and reports what the service counted.
async fn run_workers<F, Fut>(
    name: &'static str,
    config: &Config,
    service: Arc<Service>,
    work: F,
) -> Result<RunStats, Error>
where
    F: Fn(Vec<u64>) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>> + Send + 'static,
{
    service::next_window(config.window).await;
    let start = Instant::now();
    let tasks: Vec<_> =
        (0..config.workers).map(|i| tokio::spawn(work(slice(config.records, config.workers, i)))).collect();
    for task in tasks {
        task.await.expect("a demo worker panicked")?;
    }
    let elapsed = start.elapsed();
    let (sends, throttled) = service.counts();
    Ok(RunStats { name, written: sends - throttled, sends, throttled, elapsed })
}

/// The naive client: each worker sends all its remaining records as fast as it can, keeps the
/// refused ones, sleeps until the service's Retry-After, and sends what is left.
pub async fn run_naive(config: &Config) -> RunStats {
    let service = Arc::new(Service::new(config.capacity, config.window));
    let cost = config.cost;
    let work = |mut pending: Vec<u64>| {
        let service = service.clone();
        async move {
            while !pending.is_empty() {
                let mut refused = Vec::new();
                let mut retry_at = None;
                for record in pending {
                    if let Err(Throttled { retry_after }) = service.send(cost) {
                        refused.push(record);
                        retry_at = Some(Instant::now() + retry_after);
                    }
                    // Let the other workers send too, as concurrent clients would.
                    tokio::task::yield_now().await;
                }
                if let Some(at) = retry_at {
                    tokio::time::sleep_until(at.into()).await;
                }
                pending = refused;
            }
            Ok(())
        }
    };
    run_workers("naive", config, service.clone(), work).await.expect("the naive client cannot fail")
}

/// The paced client: all workers share one ratekeeper token bucket (on `backend`) and take a
/// token before each send. A send that is throttled anyway is retried after Retry-After, through
/// the limiter again, as the pattern says the application must still handle throttling.
pub async fn run_paced(config: &Config, backend: &Backend) -> Result<RunStats, Error> {
    let service = Arc::new(Service::new(config.capacity, config.window));
    let (rate, burst) = config.pacing();
    let limiter: Limiter = backend.token_bucket("ingest", rate, burst)?;
    let cost = config.cost;
    // The longest a worker waits for a token before backing off; with many workers sharing
    // the rate a wait is a few milliseconds, so this only bounds pathological cases.
    let wait = config.window;
    let work = |records: Vec<u64>| {
        let service = service.clone();
        let limiter = limiter.clone();
        async move {
            for _record in records {
                loop {
                    match limiter.acquire(None, 1, Some(wait)).await {
                        Ok(_) => {}
                        Err(Error::OverLimit { retry_after }) => {
                            tokio::time::sleep(retry_after).await;
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                    match service.send(cost) {
                        Ok(()) => break,
                        Err(Throttled { retry_after }) => tokio::time::sleep(retry_after).await,
                    }
                }
            }
            Ok(())
        }
    };
    let stats = run_workers("ratekeeper", config, service.clone(), work).await?;
    // On Redis, register the bucket and send its counts now, while the limiter lives: a short
    // process would otherwise exit before the background task's next round.
    backend.flush().await?;
    Ok(stats)
}

fn table_header() -> String {
    format!(
        "{:<12}{:>9}{:>16}{:>12}{:>15}{:>11}",
        "run", "records", "requests sent", "throttled", "sends/record", "elapsed"
    )
}

fn table_row(stats: &RunStats) -> String {
    format!(
        "{:<12}{:>9}{:>16}{:>12}{:>15.2}{:>11}",
        stats.name,
        thousands(stats.written),
        thousands(stats.sends),
        thousands(stats.throttled),
        stats.sends_per_record(),
        format_duration(stats.elapsed),
    )
}

/// 12345 -> "12,345".
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Seconds with two decimals ("5.21 s"), or whole milliseconds below a second ("200 ms").
pub(crate) fn format_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) && d.subsec_micros() % 1000 == 0 {
        format!("{} ms", d.as_millis())
    } else if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The story at a smaller scale: 1,000 records, 200 per 200 ms window (1,000 records/s), so
    /// the naive client still needs five passes. Asserts the shape, not the timing.
    #[test]
    fn naive_resends_and_paced_does_not() {
        let config =
            Config { records: 1_000, workers: 8, capacity: 2_000, cost: 10, window: Duration::from_millis(200) };
        config.validate().unwrap();
        let (naive, paced) = ratekeeper::runtime()
            .block_on(async { (run_naive(&config).await, run_paced(&config, &Backend::memory()).await.unwrap()) });
        for stats in [&naive, &paced] {
            assert_eq!(stats.written, config.records, "{stats:?}");
            assert_eq!(stats.sends, stats.written + stats.throttled, "{stats:?}");
        }
        assert!(naive.sends >= 2 * config.records, "{naive:?}");
        assert!(paced.sends as f64 <= 1.05 * config.records as f64, "{paced:?}");
        assert!(paced.throttled as f64 <= 0.01 * config.records as f64, "{paced:?}");
    }

    #[test]
    fn pacing_never_exceeds_a_window() {
        for (capacity, cost, window_ms) in
            [(20_000, 10, 1000), (2_000, 10, 200), (10, 10, 1000), (190, 10, 1000), (7, 3, 50)]
        {
            let config = Config { capacity, cost, window: Duration::from_millis(window_ms), ..Config::default() };
            let (rate, burst) = config.pacing();
            // A token bucket admits at most burst + floor(rate * span) calls in any span.
            let per_window = burst + (rate * config.window.as_secs_f64() + 1e-9).floor() as u64;
            assert!(per_window <= config.records_per_window(), "{config:?}: {per_window}");
            assert!(rate > 0.0 && burst >= 1);
        }
        assert_eq!(Config::default().pacing(), (1900.0, 100));
    }

    #[test]
    fn formatting() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(30_000), "30,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(format_duration(Duration::from_secs(1)), "1 s");
        assert_eq!(format_duration(Duration::from_millis(200)), "200 ms");
        assert_eq!(format_duration(Duration::from_millis(5210)), "5.21 s");
        assert_eq!(slice(10, 3, 0), vec![0, 3, 6, 9]);
        assert_eq!(slice(10, 3, 2), vec![2, 5, 8]);
    }
}
