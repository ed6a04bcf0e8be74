//! `ratekeeper serve`: the Limits page, a JSON API and Prometheus `/metrics`, on the core's
//! runtime.
//!
//! Reads are open to whoever reaches the address (loopback by default). Writes (reset, resume,
//! block, unblock, set and clear an override) need `Authorization: Bearer TOKEN`: a header, never a cookie, so another
//! site cannot make a logged-in browser send one (a cross-site request carrying it needs a CORS
//! preflight, which this server never approves). Without `--token` the server is read-only.
//! Every request must name this server in its Host header, and at most
//! [`serve_guard::MAX_IN_FLIGHT`] read or write Redis at once (see [`serve_guard`]);
//! `/api/limiters`, a SCAN walk per limiter, is made at most once per [`LIST_FRESH`] whatever the
//! number of tabs.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use ratekeeper::{Backend, Error, ErrorKind};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::cli::ServeArgs;
use crate::ops::{self, Failure};
use crate::serve_guard::{self, Guard, Slots};

/// The page and its assets, built into the binary: no CDN, works offline.
const INDEX_HTML: &str = include_str!("web/index.html");
const APP_JS: &str = include_str!("web/app.js");
const WORDS_JS: &str = include_str!("web/words.js");
const STYLE_CSS: &str = include_str!("web/style.css");

/// The Prometheus text format's content type (version 0.0.4).
const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone)]
struct App {
    backend: Backend,
    token: Option<String>,
    history: Arc<Mutex<History>>,
    /// The last `/api/limiters` answer and when it was made (see [`list`]).
    list: Arc<tokio::sync::Mutex<Option<(Instant, Value)>>>,
    /// Slots for the requests that read or write Redis.
    slots: Slots,
}

impl App {
    /// A slot for this request's Redis work (see [`Slots`]), or the "busy" answer.
    fn slot(&self) -> ApiResult<tokio::sync::OwnedSemaphorePermit> {
        self.slots.take().map_err(ApiError::Response)
    }

    /// Drops the kept `/api/limiters` answer after a write, so the page shows the write on its
    /// next read.
    async fn forget_list(&self) {
        *self.list.lock().await = None;
    }
}

/// How long one `/api/limiters` answer is served to every reader: the page polls every 2 s, so
/// any number of open tabs costs at most one registry walk a second.
const LIST_FRESH: Duration = Duration::from_secs(1);

/// How many busiest keys each limiter of the list shows.
const LIST_BUSIEST: usize = 3;

/// The span of the "last minute" counts.
const MINUTE: Duration = Duration::from_secs(60);

/// Fleet counts as `/api/limiters` saw them, oldest first: the registry keeps only totals, so
/// the last minute's counts are the difference from the sample taken a minute ago. Samples are
/// taken when the API is read (the page reads it every 2 s), so they cost nothing when nobody
/// looks.
#[derive(Default)]
struct History {
    samples: VecDeque<(Instant, FleetCounts)>,
    /// When each limiter's fleet totals were last seen to move (seconds since the epoch): the
    /// registry's `last_seen` is renewed once a minute per process, the totals every second.
    moved: HashMap<String, f64>,
}

/// Each limiter's fleet totals (allowed, refused) at one sample, by name.
type FleetCounts = HashMap<String, (u64, u64)>;

impl History {
    /// When `v` was last used: the registry's `last_seen`, or later when this server saw its
    /// fleet totals move (within the page's 2 s poll while the page is read).
    fn last_seen(&self, v: &ops::LimiterView) -> f64 {
        self.moved.get(&v.name).map_or(v.last_seen, |&moved| moved.max(v.last_seen))
    }

    /// The counts since the baseline sample (the newest one at least a minute old, else the
    /// oldest) for every limiter, with the seconds they span; then records `views` as a sample.
    /// `now_epoch` is `now` in seconds since the epoch, for [`History::last_seen`].
    fn last_minute(&mut self, now: Instant, now_epoch: f64, views: &[ops::LimiterView]) -> HashMap<String, Value> {
        while self.samples.len() > 1 && now.duration_since(self.samples[1].0) >= MINUTE {
            self.samples.pop_front();
        }
        let mut out = HashMap::new();
        if let Some((at, counts)) = self.samples.front() {
            let seconds = now.duration_since(*at).as_secs_f64();
            for v in views {
                // A limiter absent from the baseline was registered since: all its counts are new.
                let (allowed, refused) = counts.get(&v.name).copied().unwrap_or((0, 0));
                out.insert(
                    v.name.clone(),
                    json!({
                        "allowed": v.allowed.saturating_sub(allowed),
                        "refused": v.refused.saturating_sub(refused),
                        "seconds": seconds,
                    }),
                );
            }
        }
        if let Some((_, newest)) = self.samples.back() {
            for v in views {
                if newest.get(&v.name).is_some_and(|&(a, r)| (a, r) != (v.allowed, v.refused)) {
                    self.moved.insert(v.name.clone(), now_epoch);
                }
            }
        }
        // Bounded even if many clients poll at once.
        if self.samples.len() >= 1000 {
            self.samples.remove(1);
        }
        self.samples.push_back((now, views.iter().map(|v| (v.name.clone(), (v.allowed, v.refused))).collect()));
        out
    }
}

/// Serves until SIGINT or SIGTERM. Prints the address it listens on (with the port the system
/// chose for `:0`) on stdout.
pub fn serve(backend: Backend, args: &ServeArgs) -> Result<(), Failure> {
    let token = args.token.clone().filter(|t| !t.is_empty());
    let app =
        App { backend, token: token.clone(), history: Arc::default(), list: Arc::default(), slots: Slots::default() };
    ratekeeper::runtime().block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| Failure::Io(format!("cannot listen on {}: {e}", args.listen)))?;
        let addr: SocketAddr = listener.local_addr().map_err(|e| Failure::Io(e.to_string()))?;
        let app = router(app, Guard::new(addr, &args.allow_host));
        let mode = if token.is_some() { "writes need the token" } else { "read-only: no --token" };
        println!("ratekeeper serve: listening on http://{addr}/ ({mode})");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown())
            .await
            .map_err(|e| Failure::Io(format!("serving: {e}")))
    })
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

fn router(app: App, guard: Guard) -> Router {
    Router::new()
        .route("/", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX_HTML) }))
        .route("/app.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], APP_JS) }))
        .route("/words.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], WORDS_JS) }))
        .route("/style.css", get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE_CSS) }))
        .route("/metrics", get(metrics))
        .route("/api/limiters", get(list))
        .route("/api/limiters/{name}", get(detail))
        .route("/api/limiters/{name}/override", post(set_override).delete(clear_override))
        .route("/api/limiters/{name}/reset", post(reset))
        .route("/api/limiters/{name}/resume", post(resume))
        .route("/api/limiters/{name}/block", post(block))
        .route("/api/limiters/{name}/unblock", post(unblock))
        .route("/api/limiters/{name}/forget", post(forget))
        .with_state(app)
        .layer(axum::middleware::from_fn_with_state(guard, serve_guard::guard))
}

/// An error as the API answers it: a status and `{"error": {"kind", "parameter", "message"}}`
/// (or a response made already, e.g. [`Slots::take`]'s).
enum ApiError {
    Error(StatusCode, &'static str, Option<String>, String),
    /// A finished answer (boxed: it is far larger than the other variant).
    Response(Box<Response>),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Error(status, kind, parameter, message) => {
                let body = json!({ "error": { "kind": kind, "parameter": parameter, "message": message } });
                (status, Json(body)).into_response()
            }
            ApiError::Response(response) => *response,
        }
    }
}

impl From<Failure> for ApiError {
    fn from(failure: Failure) -> ApiError {
        let message = failure.to_string();
        match failure {
            Failure::Ratekeeper(e) => {
                let status = match e.kind() {
                    ErrorKind::InvalidArgument => StatusCode::BAD_REQUEST,
                    ErrorKind::OverLimit => StatusCode::TOO_MANY_REQUESTS,
                    _ => StatusCode::SERVICE_UNAVAILABLE,
                };
                ApiError::Error(status, e.kind().as_str(), e.parameter().map(str::to_owned), message)
            }
            Failure::UnknownLimiter(_) => {
                ApiError::Error(StatusCode::NOT_FOUND, "not_found", Some("name".into()), message)
            }
            Failure::NoBackend | Failure::Io(_) => {
                ApiError::Error(StatusCode::INTERNAL_SERVER_ERROR, "internal", None, message)
            }
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        Failure::Ratekeeper(e).into()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// Checks the bearer token of a write; compares in constant time so the token cannot be guessed
/// byte by byte from response times.
fn authorize(app: &App, headers: &HeaderMap) -> ApiResult<()> {
    let Some(expected) = &app.token else {
        return Err(ApiError::Error(
            StatusCode::FORBIDDEN,
            "read_only",
            None,
            "this server is read-only: start `ratekeeper serve` with `--token` to allow resets and overrides".into(),
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let same = given.len() == expected.len()
        && given.bytes().zip(expected.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    if same {
        Ok(())
    } else {
        Err(ApiError::Error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            Some("Authorization".into()),
            "a reset or override needs the header `Authorization: Bearer TOKEN` with the server's token".into(),
        ))
    }
}

/// Fleet metrics in the Prometheus text format.
async fn metrics(State(app): State<App>) -> ApiResult<Response> {
    let _slot = app.slot()?;
    let text = app.backend.prometheus(true).await?;
    Ok(([(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)], text).into_response())
}

/// `GET /api/limiters`: the registry with fleet counts, each limiter's counts of the last
/// minute (`last_minute`: `{allowed, refused, seconds}`, over fewer seconds while the server has
/// been read for less than a minute; `null` on the first read), its `usage` (the busiest keys,
/// a concurrent limiter's holders and waiters of its busiest key, the last hour per minute),
/// and the server's time for "ago".
///
/// Single flight: readers that arrive while an answer is being made wait for it and share it, and
/// an answer is served again for [`LIST_FRESH`]; only the first reader after that walks the
/// registry again. A failure is not kept: the next reader tries anew.
async fn list(State(app): State<App>) -> ApiResult<Json<Value>> {
    let arrived = Instant::now();
    let mut last = app.list.lock().await;
    if let Some((made, answer)) = &*last {
        // Made after this reader arrived (it waited for it), or recently enough.
        if *made >= arrived || made.elapsed() < LIST_FRESH {
            return Ok(Json(answer.clone()));
        }
    }
    let _slot = app.slot()?;
    let answer = list_now(&app).await?;
    *last = Some((Instant::now(), answer.clone()));
    Ok(Json(answer))
}

/// A fresh `/api/limiters` answer.
async fn list_now(app: &App) -> ApiResult<Value> {
    let views = ops::limiters_with_usage(&app.backend, LIST_BUSIEST).await?;
    let now_epoch = now();
    let mut history = app.history.lock().expect("history lock");
    let mut recent = history.last_minute(Instant::now(), now_epoch, &views);
    let limiters: Vec<Value> = views
        .into_iter()
        .map(|v| {
            // No baseline yet (the first read): the last whole minute of the fleet's history.
            let last_minute = recent.remove(&v.name).or_else(|| previous_minute(&v, now_epoch)).unwrap_or(Value::Null);
            let last_seen = history.last_seen(&v);
            let mut value = serde_json::to_value(v).expect("views serialize");
            value["last_minute"] = last_minute;
            value["last_seen"] = json!(last_seen);
            value
        })
        .collect();
    drop(history);
    Ok(json!({ "now": now(), "writable": app.token.is_some(), "limiters": limiters }))
}

/// The counts of the minute before the current one (by the Redis server's minutes), from a
/// limiter's history: what the page shows under "Last minute" before it has a baseline of its own.
fn previous_minute(v: &ops::LimiterView, now_epoch: f64) -> Option<Value> {
    let history = &v.usage.as_ref()?.history;
    let current = (now_epoch / 60.0).floor() * 60.0;
    let (allowed, refused) = history
        .iter()
        .filter(|m| m.start >= current - 60.0 && m.start < current)
        .fold((0, 0), |(a, r), m| (a + m.allowed, r + m.refused));
    Some(json!({ "allowed": allowed, "refused": refused, "seconds": 60.0 }))
}

/// The `key` of a request, in the query string or the JSON body.
#[derive(Debug, Deserialize, Default)]
struct KeyQuery {
    key: Option<String>,
}

/// `GET /api/limiters/{name}?key=K`: inspect one key.
async fn detail(State(app): State<App>, Path(name): Path<String>, Query(q): Query<KeyQuery>) -> ApiResult<Json<Value>> {
    let key = q.key.filter(|k| !k.is_empty());
    let _slot = app.slot()?;
    let view = ops::inspect(&app.backend, &name, key.as_deref()).await?;
    let mut value = serde_json::to_value(view).expect("views serialize");
    value["now"] = json!(now());
    Ok(Json(value))
}

/// The body of `POST /api/limiters/{name}/override`.
#[derive(Debug, Deserialize)]
struct OverrideBody {
    /// The spec, as a JSON object (or a string holding one).
    spec: Value,
    /// One key's override; none for the whole limiter.
    #[serde(default)]
    key: Option<String>,
}

async fn set_override(
    State(app): State<App>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Json<OverrideBody>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<Json<Value>> {
    authorize(&app, &headers)?;
    let _slot = app.slot()?;
    let Json(body) = body.map_err(|e| {
        ApiError::Error(StatusCode::BAD_REQUEST, "invalid_argument", Some("body".into()), e.body_text())
    })?;
    let spec = match &body.spec {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let key = body.key.filter(|k| !k.is_empty());
    app.backend.set_limit_json(&name, &spec, key.as_deref()).await?;
    app.forget_list().await;
    Ok(Json(json!({ "ok": true, "name": name, "key": key })))
}

async fn clear_override(
    State(app): State<App>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<KeyQuery>,
) -> ApiResult<Json<Value>> {
    authorize(&app, &headers)?;
    let _slot = app.slot()?;
    let key = q.key.filter(|k| !k.is_empty());
    app.backend.clear_limit(&name, key.as_deref()).await?;
    app.forget_list().await;
    Ok(Json(json!({ "ok": true, "name": name, "key": key })))
}

async fn reset(
    State(app): State<App>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<KeyQuery>,
) -> ApiResult<Json<Value>> {
    authorize(&app, &headers)?;
    let _slot = app.slot()?;
    let key = q.key.filter(|k| !k.is_empty());
    ops::reset(&app.backend, &name, key.as_deref()).await?;
    app.forget_list().await;
    Ok(Json(json!({ "ok": true, "name": name, "key": key })))
}

/// Ends a key's pause (`"resumed"`: whether one was in effect).
async fn resume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<KeyQuery>,
) -> ApiResult<Json<Value>> {
    authorize(&app, &headers)?;
    let key = q.key.filter(|k| !k.is_empty());
    let resumed = ops::resume(&app.backend, &name, key.as_deref()).await?;
    Ok(Json(json!({ "ok": true, "name": name, "key": key, "resumed": resumed })))
}

/// The `key` and `seconds` of a block request.
#[derive(Debug, Deserialize, Default)]
struct BlockQuery {
    key: Option<String>,
    seconds: Option<f64>,
}

/// Blocks a key for `seconds` (`"blocked_for"`: the block in effect, in seconds).
async fn block(
    State(app): State<App>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<BlockQuery>,
) -> ApiResult<Json<Value>> {
    authorize(&app, &headers)?;
    let key = q.key.filter(|k| !k.is_empty());
    // A missing `seconds` is refused by the core's validation, naming `duration`.
    let in_effect = ops::block(&app.backend, &name, key.as_deref(), q.seconds.unwrap_or(f64::NAN)).await?;
    Ok(Json(json!({ "ok": true, "name": name, "key": key, "blocked_for": in_effect.as_secs_f64() })))
}

/// Ends a key's block (`"unblocked"`: whether one was in effect).
async fn unblock(
    State(app): State<App>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<KeyQuery>,
) -> ApiResult<Json<Value>> {
    authorize(&app, &headers)?;
    let key = q.key.filter(|k| !k.is_empty());
    let unblocked = ops::unblock(&app.backend, &name, key.as_deref()).await?;
    Ok(Json(json!({ "ok": true, "name": name, "key": key, "unblocked": unblocked })))
}

/// Removes a limiter from the registry (`"forgotten"`: whether it was listed); see
/// `ratekeeper forget`.
async fn forget(State(app): State<App>, headers: HeaderMap, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    authorize(&app, &headers)?;
    let _slot = app.slot()?;
    let forgotten = app.backend.forget_limiter(&name).await?;
    app.forget_list().await;
    Ok(Json(json!({ "ok": true, "name": name, "forgotten": forgotten })))
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(name: &str, allowed: u64, refused: u64) -> ops::LimiterView {
        ops::LimiterView {
            name: name.into(),
            kind: "window".into(),
            spec: Value::Null,
            spec_words: String::new(),
            overrides: vec![],
            users: vec![],
            processes: 1,
            first_seen: 0.0,
            last_seen: 0.0,
            conflict: None,
            waiting: false,
            allowed,
            refused,
            errors: 0,
            shadow_refused: 0,
            usage: None,
        }
    }

    #[test]
    fn last_minute_counts_are_differences_from_a_minute_ago() {
        let mut history = History::default();
        let t0 = Instant::now();
        assert!(history.last_minute(t0, 0.0, &[view("a", 10, 1)]).is_empty(), "no baseline on the first read");
        let at = |s: u64| t0 + Duration::from_secs(s);
        let recent = history.last_minute(at(30), 30.0, &[view("a", 40, 2), view("b", 5, 0)]);
        assert_eq!(recent["a"], json!({ "allowed": 30, "refused": 1, "seconds": 30.0 }));
        assert_eq!(recent["b"], json!({ "allowed": 5, "refused": 0, "seconds": 30.0 }), "new since the baseline");
        history.last_minute(at(61), 61.0, &[view("a", 100, 2)]);
        // At 95 s the baseline is the newest sample at least a minute old: the one at 30 s.
        let recent = history.last_minute(at(95), 95.0, &[view("a", 130, 9)]);
        assert_eq!(recent["a"], json!({ "allowed": 90, "refused": 7, "seconds": 65.0 }));
        assert_eq!(history.samples.front().unwrap().0, at(30));
    }

    /// Issue 46: "Last seen" lagged traffic by 20–40 s (the registry is renewed once a minute);
    /// it follows the fleet totals the page reads every 2 s.
    #[test]
    fn last_seen_follows_the_totals() {
        let mut history = History::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        history.last_minute(t0, 1000.0, &[view("a", 10, 1), view("b", 5, 0)]);
        history.last_minute(at(2), 1002.0, &[view("a", 11, 1), view("b", 5, 0)]);
        let (a, b) = (view("a", 11, 1), view("b", 5, 0));
        assert_eq!(history.last_seen(&a), 1002.0, "moved between the reads");
        assert_eq!(history.last_seen(&b), 0.0, "did not move: the registry's");
    }

    /// Issue 46: "Last minute" showed `– / –` on the first load; it shows the previous whole
    /// minute of the fleet's history until the page has a baseline.
    #[test]
    fn the_first_read_shows_the_previous_minute_from_history() {
        let mut v = view("a", 10, 1);
        v.usage = Some(ops::UsageView {
            concurrent: None,
            busiest_keys: vec![],
            history: vec![
                ops::MinuteView { start: 1020.0, allowed: 4, refused: 1 },
                ops::MinuteView { start: 1080.0, allowed: 7, refused: 2 },
                ops::MinuteView { start: 1140.0, allowed: 9, refused: 0 },
            ],
        });
        assert_eq!(previous_minute(&v, 1150.0), Some(json!({ "allowed": 7, "refused": 2, "seconds": 60.0 })));
        assert_eq!(previous_minute(&view("b", 0, 0), 1150.0), None, "no usage read");
    }
}
