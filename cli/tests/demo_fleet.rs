//! `ratekeeper demo --processes 8`: eight OS processes share leased partitions of the simulated
//! service's rate on a real Redis server. The service counts no throttled request and exactly
//! one send per record. The elapsed time against the ideal is printed, not asserted (a figure,
//! see the README).

mod support;

use support::{run, RedisServer};

#[test]
fn eight_processes_share_partitions_without_a_throttled_request() {
    let server = RedisServer::start();
    let url = server.url();
    // 2,000 records at 1,900 per second: about a second of sending after the processes start.
    let args = ["--redis", &url, "--prefix", "fleetdemo", "demo", "--processes", "8", "--records", "2000"];
    let (code, out, err) = run(&args);
    println!("{out}");
    assert_eq!(code, 0, "{out}\n{err}");
    let summary = out.lines().find(|l| l.starts_with("throttled ")).unwrap_or_else(|| panic!("no summary: {out}"));
    assert!(summary.starts_with("throttled 0, 1.00 sends per record,"), "{summary}");
    let row = out.lines().find(|l| l.starts_with("8 ")).unwrap_or_else(|| panic!("no table row: {out}"));
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&columns[..4], ["8", "2,000", "2,000", "0"], "records, requests sent, throttled: {row}");
}

#[test]
fn processes_need_a_shared_backend() {
    let (code, _, err) = run(&["demo", "--processes", "8"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--processes` needs --redis, --cluster or --sentinel"), "{err}");
}
