//! `ratekeeper serve` over real HTTP against a real redis-server: the JSON API, `/metrics`, the
//! page and its assets, and the token that guards writes.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};

use std::sync::{Arc, Barrier};
use std::time::Duration;

use serde_json::{json, Value};
use support::{ratekeeper, run, wait_until, RedisCluster, RedisServer};

/// How long `serve` serves one `/api/limiters` answer to every reader, and a little more.
const LIST_FRESH: Duration = Duration::from_millis(1100);

/// A running `ratekeeper serve`, stopped (SIGTERM, by pid) when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(redis: &str, token: Option<&str>) -> Server {
        Server::start_on(&["--redis", redis], token)
    }

    /// `ratekeeper BACKEND_ARGS serve` on a free loopback port.
    fn start_on(backend: &[&str], token: Option<&str>) -> Server {
        Server::start_with(backend, token, &[])
    }

    /// [`Self::start_on`] with more `serve` options.
    fn start_with(backend: &[&str], token: Option<&str>, options: &[&str]) -> Server {
        let mut cmd = ratekeeper();
        cmd.args(backend).args(["serve", "--listen", "127.0.0.1:0"]).args(options);
        if let Some(token) = token {
            cmd.args(["--token", token]);
        }
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("start ratekeeper serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.split("http://").nth(1).and_then(|s| s.split('/').next()).unwrap_or_default().to_owned();
        assert!(!addr.is_empty(), "no address in {line:?}");
        Server { child, addr }
    }

    /// One HTTP/1.1 request; returns (status, content type, body).
    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> (u16, String, String) {
        self.request_as(&self.addr, method, path, headers, body)
    }

    /// [`Self::request`] naming `host` in its Host header.
    fn request_as(
        &self,
        host: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, String, String) {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        for (name, value) in headers {
            req.push_str(&format!("{name}: {value}\r\n"));
        }
        let body = body.unwrap_or("");
        if !body.is_empty() {
            req.push_str("Content-Type: application/json\r\n");
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        stream.write_all(req.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let content_type = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_owned))
            .unwrap_or_default();
        (status, content_type, body.to_owned())
    }

    fn get_json(&self, path: &str) -> Value {
        let (status, _, body) = self.request("GET", path, &[], None);
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

fn make_limiter(redis: &str) {
    let (code, _, err) = run(&[
        "--redis",
        redis,
        "run",
        "api",
        "--spec",
        r#"{"kind":"window","limit":5,"interval":60}"#,
        "--key",
        "k",
        "--",
        "true",
    ]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn reads_the_registry_metrics_and_the_page() {
    let redis = RedisServer::start();
    make_limiter(&redis.url());
    let server = Server::start(&redis.url(), None);

    let list = server.get_json("/api/limiters");
    assert_eq!(list["writable"], false);
    // No baseline of its own before the first read: the previous whole minute of the history
    // (issue 46: it was null, shown as "– / –").
    let first = &list["limiters"][0]["last_minute"];
    assert_eq!(first["seconds"], 60.0, "{first}");
    assert!(first["allowed"].as_u64().is_some_and(|n| n <= 1), "{first}");
    let api = &list["limiters"][0];
    assert_eq!(
        (api["name"].as_str(), api["kind"].as_str(), api["allowed"].as_u64()),
        (Some("api"), Some("window"), Some(1))
    );
    // Each spec comes with its words: the page knows no kind.
    assert_eq!(api["spec_words"], "5 per minute", "{api}");

    make_limiter(&redis.url());
    // One answer is served to every reader for a second (see `one_registry_walk_serves_every_reader`).
    std::thread::sleep(LIST_FRESH);
    let recent = &server.get_json("/api/limiters")["limiters"][0]["last_minute"];
    assert_eq!((recent["allowed"].as_u64(), recent["refused"].as_u64()), (Some(1), Some(0)), "{recent}");

    let detail = server.get_json("/api/limiters/api?key=k");
    assert_eq!(
        (detail["limit"].as_u64(), detail["remaining"].as_u64(), detail["key"].as_str()),
        (Some(5), Some(3), Some("k"))
    );
    assert_eq!(
        (detail["spec_words"].as_str(), detail["effective_spec_words"].as_str()),
        (Some("5 per minute"), Some("5 per minute"))
    );
    let (status, _, body) = server.request("GET", "/api/limiters/nope", &[], None);
    assert_eq!(status, 404, "{body}");
    let (status, _, body) = server.request("GET", "/api/limiters/bad%20name", &[], None);
    assert_eq!(status, 400, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["parameter"], "name");

    let (status, content_type, body) = server.request("GET", "/metrics", &[], None);
    assert_eq!(status, 200);
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    assert!(body.contains(r#"ratekeeper_checks_total{limiter="api",kind="window",outcome="allowed"} 2"#), "{body}");

    let (status, content_type, page) = server.request("GET", "/", &[], None);
    assert_eq!((status, content_type.as_str()), (200, "text/html; charset=utf-8"));
    // Everything the page loads is served here: no CDN.
    assert!(!page.contains("https://") && !page.contains("http://"), "external asset in the page");
    for asset in ["/app.js", "/style.css"] {
        assert!(page.contains(asset));
        assert_eq!(server.request("GET", asset, &[], None).0, 200, "{asset}");
    }
}

#[test]
fn writes_need_the_token() {
    let redis = RedisServer::start();
    make_limiter(&redis.url());
    let read_only = Server::start(&redis.url(), None);
    let (status, _, body) =
        read_only.request("POST", "/api/limiters/api/reset?key=k", &[("Authorization", "Bearer x")], None);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("read-only"));
    drop(read_only);

    let server = Server::start(&redis.url(), Some("s3cret"));
    let spec = json!({ "spec": { "kind": "window", "limit": 9, "interval": 60 }, "key": "k" }).to_string();
    let good = [("Authorization", "Bearer s3cret")];
    for headers in [&[][..], &[("Authorization", "Bearer wrong")][..], &[("Cookie", "token=s3cret")][..]] {
        assert_eq!(server.request("POST", "/api/limiters/api/override", headers, Some(&spec)).0, 401, "{headers:?}");
        assert_eq!(server.request("DELETE", "/api/limiters/api/override?key=k", headers, None).0, 401);
        assert_eq!(server.request("POST", "/api/limiters/api/reset?key=k", headers, None).0, 401);
    }
    assert_eq!(server.get_json("/api/limiters")["limiters"][0]["overrides"], json!([]), "nothing was written");
    assert_eq!(server.get_json("/api/limiters/api?key=k")["remaining"], 4, "nothing was reset");

    let (status, _, body) = server.request("POST", "/api/limiters/api/override", &good, Some(&spec));
    assert_eq!(status, 200, "{body}");
    let detail = server.get_json("/api/limiters/api?key=k");
    assert_eq!((detail["limit"].as_u64(), detail["remaining"].as_u64()), (Some(9), Some(8)));
    let (status, _, body) = server.request("POST", "/api/limiters/api/reset?key=k", &good, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.get_json("/api/limiters/api?key=k")["remaining"], 9);
    let (status, _, _) = server.request("DELETE", "/api/limiters/api/override?key=k", &good, None);
    assert_eq!(status, 200);
    assert_eq!(server.get_json("/api/limiters/api?key=k")["limit"], 5);

    // Resume: a pause another process wrote ends for the key, behind the token.
    let backend = ratekeeper::Backend::redis(&redis.url()).unwrap();
    let api = backend.window("api", 5, std::time::Duration::from_secs(60)).unwrap();
    api.pause_blocking(Some("k"), std::time::Duration::from_secs(600)).unwrap();
    assert!(!api.check_blocking(Some("k"), 1).unwrap().allowed);
    assert_eq!(server.request("POST", "/api/limiters/api/resume?key=k", &[], None).0, 401);
    assert!(!api.check_blocking(Some("k"), 1).unwrap().allowed, "still paused");
    let (status, _, body) = server.request("POST", "/api/limiters/api/resume?key=k", &good, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["resumed"], true);
    assert!(api.check_blocking(Some("k"), 1).unwrap().allowed, "resumed");
    let (_, _, body) = server.request("POST", "/api/limiters/api/resume?key=k", &good, None);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["resumed"], false);

    // Block and unblock a key, behind the token; a bad duration is named.
    assert_eq!(server.request("POST", "/api/limiters/api/block?key=k&seconds=600", &[], None).0, 401);
    assert!(api.check_blocking(Some("k"), 1).unwrap().allowed, "not blocked without the token");
    let (status, _, body) = server.request("POST", "/api/limiters/api/block?key=k&seconds=600", &good, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["blocked_for"], 600.0);
    let blocked = api.check_blocking(Some("k"), 1).unwrap();
    assert!(!blocked.allowed && blocked.retry_after > std::time::Duration::from_secs(590), "{blocked:?}");
    assert_eq!(server.request("POST", "/api/limiters/api/unblock?key=k", &[], None).0, 401);
    let (status, _, body) = server.request("POST", "/api/limiters/api/unblock?key=k", &good, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["unblocked"], true);
    assert!(api.check_blocking(Some("k"), 1).unwrap().allowed, "unblocked");
    let (status, _, body) = server.request("POST", "/api/limiters/api/block?key=k&seconds=0", &good, None);
    assert_eq!(status, 400, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["parameter"], "duration");

    // Bad input: 400 naming the parameter.
    let bad = json!({ "spec": { "kind": "window", "limit": 0, "interval": 60 } }).to_string();
    let (status, _, body) = server.request("POST", "/api/limiters/api/override", &good, Some(&bad));
    assert_eq!(status, 400, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["parameter"], "limit");
    let (status, _, body) = server.request("POST", "/api/limiters/api/override", &good, Some("{\"spek\":1}"));
    assert_eq!(status, 400, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["parameter"], "body");

    // Forget (issue 46): the limiter leaves the registry, behind the token.
    assert_eq!(server.request("POST", "/api/limiters/api/forget", &[], None).0, 401);
    drop(api);
    drop(backend);
    let (status, _, body) = server.request("POST", "/api/limiters/api/forget", &good, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["forgotten"], true, "{body}");
    assert_eq!(server.get_json("/api/limiters")["limiters"], json!([]), "no longer listed");
}

#[test]
fn serves_a_cluster() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seeds().join(",");
    let (code, _, err) = run(&["--cluster", &seeds, "run", "job", "--", "true"]);
    assert_eq!(code, 0, "{err}");
    let server = Server::start_on(&["--cluster", &seeds], Some("t"));
    let list = server.get_json("/api/limiters");
    assert_eq!(list["limiters"][0]["name"], "job");
    assert_eq!(list["limiters"][0]["allowed"], 1);
    let (status, _, body) = server.request("POST", "/api/limiters/job/reset", &[("Authorization", "Bearer t")], None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.get_json("/api/limiters/job")["remaining"], 1);
    let (_, _, metrics) = server.request("GET", "/metrics", &[], None);
    assert!(
        metrics.contains(r#"ratekeeper_concurrent_held_total{limiter="job",kind="concurrent",wait="immediate"} 1"#),
        "{metrics}"
    );
}

/// DNS rebinding (issue #31, item 10): a page at `http://evil.example/` whose name now resolves to
/// 127.0.0.1 reads the server as its own origin, but its requests say `Host: evil.example`. They
/// are refused before anything is read; the listen address, loopback names and `--allow-host`
/// names are served.
#[test]
fn refuses_hosts_it_does_not_serve() {
    let redis = RedisServer::start();
    make_limiter(&redis.url());
    let server = Server::start(&redis.url(), Some("t"));
    let port = server.addr.rsplit(':').next().unwrap().to_owned();
    let auth = [("Authorization", "Bearer t")];
    for host in ["evil.example".to_owned(), format!("evil.example:{port}"), format!("localhost.evil.example:{port}")] {
        for path in ["/api/limiters", "/api/limiters/api?key=k", "/metrics", "/"] {
            let (status, _, body) = server.request_as(&host, "GET", path, &[], None);
            assert_eq!(status, 403, "{host} {path}: {body}");
            assert!(!body.contains("\"api\"") && !body.contains("ratekeeper_"), "{host} {path} leaks: {body}");
            assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["kind"], "host_not_allowed");
        }
        let (status, _, _) = server.request_as(&host, "POST", "/api/limiters/api/reset?key=k", &auth, None);
        assert_eq!(status, 403, "{host}: a write with the token");
    }
    assert_eq!(server.get_json("/api/limiters/api?key=k")["remaining"], 4, "the refused reset wrote nothing");
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), "LOCALHOST".to_owned()] {
        let (status, _, body) = server.request_as(&host, "GET", "/api/limiters", &[], None);
        assert_eq!(status, 200, "{host}: {body}");
    }
    drop(server);

    let server = Server::start_with(
        &["--redis", &redis.url()],
        None,
        &["--allow-host", "ops.example", "--allow-host", "Rk.Internal."],
    );
    for host in ["ops.example", "ops.example:8080", "rk.internal", "localhost"] {
        let (status, _, body) = server.request_as(host, "GET", "/api/limiters", &[], None);
        assert_eq!(status, 200, "{host}: {body}");
    }
    assert_eq!(server.request_as("evil.example", "GET", "/api/limiters", &[], None).0, 403);

    // --allow-host takes a host name or address, nothing else.
    for bad in ["", "http://ops.example", "ops.example:8080", "ops.example/x", "a b"] {
        let (code, _, err) = run(&["--redis", &redis.url(), "serve", "--allow-host", bad]);
        assert_eq!(code, 2, "--allow-host {bad:?}: {err}");
        assert!(err.contains("--allow-host"), "the error names the option: {err}");
    }
}

/// SCAN calls the server has run so far.
fn scans(redis: &RedisServer) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    let line = stats.lines().find(|l| l.starts_with("cmdstat_scan:")).unwrap_or("cmdstat_scan:calls=0,");
    line["cmdstat_scan:calls=".len()..].split(',').next().unwrap().parse().unwrap()
}

/// Each `/api/limiters` walks the registry with SCAN per limiter (issue #31, item 10): readers
/// that arrive together share one walk, and an answer serves every reader for a second.
#[test]
fn one_registry_walk_serves_every_reader() {
    let redis = RedisServer::start();
    make_limiter(&redis.url());
    let server = Arc::new(Server::start(&redis.url(), None));
    let before = scans(&redis);
    server.get_json("/api/limiters");
    let one_walk = scans(&redis) - before;
    assert!(one_walk > 0, "an answer walks the registry with SCAN");

    std::thread::sleep(LIST_FRESH);
    let before = scans(&redis);
    let readers = 12;
    let barrier = Arc::new(Barrier::new(readers));
    let threads: Vec<_> = (0..readers)
        .map(|_| {
            let (server, barrier) = (server.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                server.request("GET", "/api/limiters", &[], None)
            })
        })
        .collect();
    let mut bodies = Vec::new();
    for thread in threads {
        let (status, _, body) = thread.join().unwrap();
        assert_eq!(status, 200, "{body}");
        bodies.push(serde_json::from_str::<Value>(&body).unwrap());
    }
    let walks = scans(&redis) - before;
    // Readers straddling the end of an answer's second may make a second walk; never one each.
    assert!(walks <= 2 * one_walk, "{readers} readers made {walks} SCAN calls; one answer makes {one_walk}");
    assert!(bodies.iter().all(|b| b["limiters"][0]["name"] == "api"));
}

/// Requests that read Redis are bounded (issue #31, item 10): past the bound, a request is
/// answered 503 `busy` with Retry-After at once instead of adding to Redis's load.
#[test]
fn requests_reading_redis_are_bounded() {
    let redis = RedisServer::start();
    make_limiter(&redis.url());
    let server = Arc::new(Server::start(&redis.url(), None));
    // A paused server: each read waits for its deadline, so requests pile up.
    redis.pause();
    let mut busy = None;
    for _burst in 0..10 {
        let requests = 48;
        let barrier = Arc::new(Barrier::new(requests));
        let threads: Vec<_> = (0..requests)
            .map(|i| {
                let (server, barrier) = (server.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    server.request("GET", &format!("/api/limiters/api?key=k{i}"), &[], None)
                })
            })
            .collect();
        let answers: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for (status, _, body) in &answers {
            assert_eq!(*status, 503, "Redis is paused: {body}");
        }
        busy = answers.into_iter().find(|(_, _, body)| body.contains("\"busy\""));
        if busy.is_some() {
            break;
        }
    }
    redis.resume();
    let (_, _, body) = busy.expect("48 requests at once: some are answered busy");
    assert!(body.contains("try again"), "{body}");
    wait_until("the server answers again", Duration::from_secs(30), || {
        server.request("GET", "/api/limiters/api?key=k", &[], None).0 == 200
    });
}
