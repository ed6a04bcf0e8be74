//! `ratekeeper demo --processes N`: Azure's story with N uncoordinated OS processes.
//!
//! The parent runs the simulated throttled service (the same fixed windows as the in-process
//! demo) on a loopback TCP port, and holds the queue of records. It starts N copies of this
//! binary as workers; each leases partitions of the service's rate from Redis
//! (`backend.partitions`), and until the queue is empty takes a record's worth of its own
//! paced rate (`acquire`) and sends one record. A worker that is done gives its partitions back
//! (`close`). The parent prints what the service counted: throttled requests, sends per record,
//! and the elapsed time against the ideal (the records at the service's full rate).
//!
//! The protocol is one line per message. Worker: `READY` (it holds its share), then `SEND <µs>`
//! per record (the instant it sent it). Parent: `GO` once every worker is ready, then per send
//! `OK`, `THROTTLED <µs>` (retry after) or `DONE` (the queue is empty; the send is not counted).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ratekeeper::{Backend, Error, Limiter};

use crate::cli::{BackendArgs, DemoArgs};
use crate::demo::service::{now_us, Service, Throttled};
use crate::demo::{format_duration as duration_text, thousands as thousands_text, Config};

/// The share of the service's rate the fleet paces to: what the service accepts per window,
/// less 5% of headroom for the units each process may carry across a window's edge.
const PACED_SHARE: f64 = 0.95;

/// The partitions limiter every worker builds: (total rate, partitions, lease TTL).
fn spec(config: &Config, args: &DemoArgs) -> (f64, u64, Duration) {
    let per_second = config.records_per_window() as f64 / config.window.as_secs_f64();
    (per_second * PACED_SHARE, args.partitions, Duration::from_millis(args.lease_ttl_ms))
}

/// What the parent counts.
#[derive(Default)]
struct Counts {
    written: AtomicU64,
    sends: AtomicU64,
    throttled: AtomicU64,
    /// When the last record was written.
    last: Mutex<Option<Instant>>,
}

/// The parent: serves, spawns `processes` workers, prints the outcome.
pub fn run(config: &Config, args: &DemoArgs, backend: &BackendArgs, processes: usize) -> Result<(), String> {
    if backend.redis.is_none() && backend.cluster.is_empty() && backend.sentinel.is_empty() {
        return Err("`--processes` needs --redis, --cluster or --sentinel: the processes share partitions there".into());
    }
    if !(1..=64).contains(&processes) {
        return Err("`--processes` must be between 1 and 64".into());
    }
    let (rate, partitions, ttl) = spec(config, args);
    Backend::memory().partitions("check", rate, partitions, ttl, 0, false).map_err(|e| e.to_string())?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot listen on loopback: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!(
        "Simulated service: {} records per {} window. {} records, {processes} processes sharing \
         partitions(\"ingest\", {}/s, partitions={partitions}, lease_ttl={}) on Redis.",
        thousands_text(config.records_per_window()),
        duration_text(config.window),
        thousands_text(config.records),
        thousands_text(rate.round() as u64),
        duration_text(ttl),
    );
    let mut children = spawn_workers(addr, args, backend, processes)?;
    let outcome = serve(listener, config, &mut children);
    for child in &mut children {
        let _ = child.wait();
    }
    let (counts, started) = outcome?;
    let written = counts.written.load(Ordering::Relaxed);
    let sends = counts.sends.load(Ordering::Relaxed);
    let throttled = counts.throttled.load(Ordering::Relaxed);
    let elapsed = counts.last.lock().unwrap().map_or(Duration::ZERO, |last| last - started);
    let ideal = Duration::from_secs_f64(
        config.records as f64 * config.window.as_secs_f64() / config.records_per_window() as f64,
    );
    let predicted = Duration::from_secs_f64(config.records as f64 / rate);
    println!();
    println!(
        "{:<11}{:>9}{:>16}{:>12}{:>15}{:>11}{:>11}",
        "processes", "records", "requests sent", "throttled", "sends/record", "elapsed", "ideal"
    );
    println!(
        "{:<11}{:>9}{:>16}{:>12}{:>15.2}{:>11}{:>11}",
        processes,
        thousands_text(written),
        thousands_text(sends),
        thousands_text(throttled),
        sends as f64 / written.max(1) as f64,
        duration_text(elapsed),
        duration_text(ideal),
    );
    println!();
    println!(
        "throttled {throttled}, {:.2} sends per record, elapsed {} = {:.2} x the ideal {} (the service's full rate)",
        sends as f64 / written.max(1) as f64,
        duration_text(elapsed),
        elapsed.as_secs_f64() / ideal.as_secs_f64(),
        duration_text(ideal),
    );
    println!(
        "predicted from the fleet's paced rate ({}/s): {}, elapsed = {:.2} x that",
        thousands_text(rate.round() as u64),
        duration_text(predicted),
        elapsed.as_secs_f64() / predicted.as_secs_f64(),
    );
    if written != config.records {
        return Err(format!("only {written} of {} records were written", config.records));
    }
    Ok(())
}

fn spawn_workers(addr: SocketAddr, args: &DemoArgs, backend: &BackendArgs, n: usize) -> Result<Vec<Child>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut children = Vec::new();
    for _ in 0..n {
        let mut cmd = Command::new(&exe);
        if let Some(url) = &backend.redis {
            // In the environment, not on the command line: `ps` shows every user a process's
            // arguments, and the URL may carry a password.
            cmd.env(crate::ops::REDIS_URL_VAR, url);
        }
        for seed in &backend.cluster {
            cmd.args(["--cluster", seed]);
        }
        for sentinel in &backend.sentinel {
            cmd.args(["--sentinel", sentinel]);
        }
        if let Some(service) = &backend.service {
            cmd.args(["--service", service]);
        }
        if let Some(prefix) = &backend.prefix {
            cmd.args(["--prefix", prefix]);
        }
        cmd.arg("demo")
            .args(["--records", &args.records.to_string(), "--capacity", &args.capacity.to_string()])
            .args(["--cost", &args.cost.to_string(), "--window-ms", &args.window_ms.to_string()])
            .args(["--partitions", &args.partitions.to_string(), "--lease-ttl-ms", &args.lease_ttl_ms.to_string()])
            .args(["--processes", &n.to_string(), "--fleet-worker", &addr.to_string()])
            .stdin(Stdio::null());
        children.push(cmd.spawn().map_err(|e| format!("cannot start a worker process: {e}"))?);
    }
    Ok(children)
}

/// Accepts every worker, waits until all are ready, says GO at the start of a window, and
/// answers sends until every worker has left. Returns the counts and when GO was said.
fn serve(listener: TcpListener, config: &Config, children: &mut [Child]) -> Result<(Arc<Counts>, Instant), String> {
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut workers = Vec::new();
    while workers.len() < children.len() {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // A worker that exits before it connects (it printed why) would be waited for
                // for ever.
                for child in children.iter_mut() {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(format!("a worker process exited before it was ready ({status})"));
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => return Err(format!("a worker did not connect: {e}")),
        };
        stream.set_nonblocking(false).map_err(|e| e.to_string())?;
        let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        let mut line = String::new();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.trim() != "READY" {
            return Err(format!("a worker failed before it was ready: {line:?}"));
        }
        workers.push((stream, reader));
    }
    let service = Arc::new(Service::new(config.capacity, config.window));
    let counts = Arc::new(Counts::default());
    let left = Arc::new(AtomicU64::new(config.records));
    // A fresh window for the first send, as the in-process demo does.
    let window_us = config.window.as_micros() as u64;
    let now = now_us();
    std::thread::sleep(Duration::from_micros((now / window_us + 1) * window_us - now));
    let started = Instant::now();
    let threads: Vec<_> = workers
        .into_iter()
        .map(|(mut stream, reader)| {
            let (service, counts, left, cost) = (service.clone(), counts.clone(), left.clone(), config.cost);
            std::thread::spawn(move || -> std::io::Result<()> {
                stream.write_all(b"GO\n")?;
                for line in reader.lines() {
                    let line = line?;
                    let Some(sent) = line.strip_prefix("SEND ").and_then(|t| t.parse::<u64>().ok()) else { break };
                    // One record at a time leaves the queue, only when written.
                    let reply = if left.load(Ordering::Acquire) == 0 {
                        "DONE\n".to_owned()
                    } else {
                        counts.sends.fetch_add(1, Ordering::Relaxed);
                        match service.send_at(cost, Some(sent)) {
                            Ok(()) => {
                                let remaining = left.fetch_sub(1, Ordering::AcqRel) - 1;
                                counts.written.fetch_add(1, Ordering::Relaxed);
                                *counts.last.lock().unwrap() = Some(Instant::now());
                                if remaining == 0 {
                                    "DONE\n".to_owned()
                                } else {
                                    "OK\n".to_owned()
                                }
                            }
                            Err(Throttled { retry_after }) => {
                                counts.throttled.fetch_add(1, Ordering::Relaxed);
                                format!("THROTTLED {}\n", retry_after.as_micros())
                            }
                        }
                    };
                    stream.write_all(reply.as_bytes())?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    Ok((counts, started))
}

/// One worker process: leases its share, says READY, then sends records at its paced rate.
pub fn work(config: &Config, args: &DemoArgs, backend: &Backend, service: SocketAddr) -> Result<(), Error> {
    let (rate, partitions, ttl) = spec(config, args);
    let limiter = backend.partitions("ingest", rate, partitions, ttl, 0, false)?;
    let processes = args.processes.unwrap_or(1) as u32;
    wait_for_share(&limiter, processes)?;
    let io = |e: std::io::Error| Error::BackendUnavailable { message: format!("the demo's service: {e}") };
    let stream = TcpStream::connect(service).map_err(io)?;
    stream.set_nodelay(true).map_err(io)?;
    let mut writer = stream.try_clone().map_err(io)?;
    let mut lines = BufReader::new(stream).lines();
    writer.write_all(b"READY\n").map_err(io)?;
    // Keep the leases renewed until every process is ready and the parent says GO.
    stream_timeout(&writer, Some(Duration::from_millis(50))).map_err(io)?;
    loop {
        match lines.next() {
            Some(Ok(line)) if line == "GO" => break,
            Some(Err(e)) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                let _ = limiter.check_blocking(None, 0);
            }
            _ => return Ok(()), // the parent gave up
        }
    }
    stream_timeout(&writer, None).map_err(io)?;
    let mut next = || lines.next().unwrap_or_else(|| Ok(String::new())).map_err(io);
    loop {
        match limiter.acquire_blocking(None, 1, Some(Duration::from_secs(30))) {
            Ok(_) => {}
            // A slow answer from a busy machine: lease again (nothing was spent).
            Err(Error::Timeout { .. } | Error::BackendUnavailable { .. }) => continue,
            Err(e) => return Err(e),
        }
        writer.write_all(format!("SEND {}\n", now_us()).as_bytes()).map_err(io)?;
        let reply = next()?;
        if let Some(retry) = reply.strip_prefix("THROTTLED ").and_then(|t| t.parse::<u64>().ok()) {
            std::thread::sleep(Duration::from_micros(retry));
        } else if reply != "OK" {
            break;
        }
    }
    limiter.close_blocking()
}

fn stream_timeout(stream: &TcpStream, timeout: Option<Duration>) -> std::io::Result<()> {
    stream.set_read_timeout(timeout)
}

/// Calls until this process holds at least its floor share and sees every process (at most a
/// few lease TTLs: holders renew every third of one).
fn wait_for_share(limiter: &Limiter, processes: u32) -> Result<(), Error> {
    let started = Instant::now();
    loop {
        match limiter.check_blocking(None, 0) {
            Ok(_) | Err(Error::Timeout { .. } | Error::BackendUnavailable { .. }) => {}
            Err(e) => return Err(e),
        }
        let held = limiter.partitions_held(None)?;
        let fair = limiter_floor(limiter, processes);
        if held.members >= processes && held.partitions.len() as u32 >= fair {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Ok(()); // go with what is held rather than stall the demo
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// floor(partitions / processes): what every process holds once the fleet has settled.
fn limiter_floor(limiter: &Limiter, processes: u32) -> u32 {
    match limiter.spec() {
        ratekeeper::LimiterSpec::Partitions { partitions, .. } => (*partitions as u32) / processes.max(1),
        _ => 0,
    }
}
