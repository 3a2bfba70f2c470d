//! Accepting connections and routing them.
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the dashboard page |
//! | `GET /metrics` | Prometheus text |
//! | `GET /api/overview` | counts, rates and two minutes of history, as JSON |
//! | `GET /api/dead-letters?queue=Q&limit=N` | a queue's dead letters (the JSON of `--json`) |
//! | `POST /api/resubmit?queue=Q&id=ID` | resubmits one dead letter (token) |
//! | `POST /api/command` | runs a `postbox` command for `postbox --admin` (token for changes) |
//!
//! Actions — the page's resubmit and every command that changes the store — are refused
//! unless the server was started with them allowed, and then need the token in the
//! `X-Postbox-Token` header. Reading needs nothing: bind to 127.0.0.1 (the default) unless
//! the network may read the store.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use clap::Parser;
use postbox::{Error, ErrorKind, MessageId, Store};
use serde_json::{Value, json};
use tiny_http::{Header, Method, Request, Response, StatusCode};

use super::sampler::{self, Sampler};
use super::{metrics, page, wire};
use crate::record::Record;
use crate::{Cli, fail, io};

/// Largest request body accepted (a command's uploaded standard input, base64).
const MAX_REQUEST: u64 = 512 << 20;
/// How often a running command's stream carries a heartbeat.
const HEARTBEAT_EVERY: Duration = Duration::from_millis(200);
/// Jobs the page shows at most (the most recent).
const MAX_JOBS_SHOWN: usize = 20;
/// Dead letters the page lists at most.
const MAX_DEAD_LETTERS: usize = 1000;

/// How [`serve_admin`] serves.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct AdminOptions {
    /// Allow actions: the dashboard's resubmit button and `postbox --admin` commands that
    /// change the store. Off by default: the endpoint then only reads.
    pub allow_actions: bool,
    /// The token actions need; `None` makes a random one ([`AdminServer::token`]).
    pub token: Option<String>,
    /// More Prometheus text appended to `/metrics` at each request (a bridge's counters).
    pub extra_metrics: Option<ExtraMetrics>,
}

/// A source of Prometheus text lines added to `/metrics`, asked at each request.
#[derive(Clone)]
pub struct ExtraMetrics(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for ExtraMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExtraMetrics")
    }
}

impl AdminOptions {
    /// Read-only serving (the default).
    pub fn read_only() -> AdminOptions {
        AdminOptions::default()
    }

    /// Serving with actions allowed, protected by `token` (`None`: a random one).
    pub fn with_actions(token: Option<String>) -> AdminOptions {
        AdminOptions {
            allow_actions: true,
            token,
            extra_metrics: None,
        }
    }
}

/// A running admin endpoint. Stops when [`AdminServer::stop`] is called or it is dropped;
/// the store stays open (the server holds a handle of its own, released at stop).
pub struct AdminServer {
    addr: SocketAddr,
    token: Option<String>,
    /// Taken at stop, so that the listening socket closes with the last clone.
    http: Mutex<Option<Arc<tiny_http::Server>>>,
    stopped: Arc<AtomicBool>,
    sampler: Arc<Sampler>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for AdminServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminServer")
            .field("addr", &self.addr)
            .field("actions", &self.token.is_some())
            .finish()
    }
}

impl AdminServer {
    /// The address it listens on (the real port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The page's URL, `http://ADDR/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The token actions need, when they are allowed.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Stops accepting, ends the sampler and waits for both. Commands still running for a
    /// remote caller finish on their own threads. Calling it again does nothing.
    pub fn stop(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        self.sampler.stop();
        let http = self
            .http
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(http) = &http {
            http.unblock();
        }
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for t in threads {
            let _ = t.join();
        }
        // The accept thread's clone went with it; this drop closes the listening socket.
        drop(http);
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serving the admin endpoint from a store: `store.serve_admin("127.0.0.1:9090")`.
pub trait ServeAdmin {
    /// Serves read-only on `addr` (`host:port`, port 0 for any free one).
    ///
    /// # Errors
    ///
    /// As [`serve_admin`].
    fn serve_admin(&self, addr: &str) -> postbox::Result<AdminServer>;

    /// Serves on `addr` with `options`.
    ///
    /// # Errors
    ///
    /// As [`serve_admin`].
    fn serve_admin_with(&self, addr: &str, options: AdminOptions) -> postbox::Result<AdminServer>;
}

impl ServeAdmin for Store {
    fn serve_admin(&self, addr: &str) -> postbox::Result<AdminServer> {
        serve_admin(self, addr, AdminOptions::default())
    }

    fn serve_admin_with(&self, addr: &str, options: AdminOptions) -> postbox::Result<AdminServer> {
        serve_admin(self, addr, options)
    }
}

/// Starts the admin endpoint for `store` on `addr` (`host:port`; port 0 picks a free one):
/// the dashboard page, `/metrics`, and the commands of `postbox --admin URL`. It runs on
/// threads of its own until [`AdminServer::stop`] or drop.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for an address that does not parse or an empty token;
/// [`Error::Io`] when it cannot listen there (address in use, no permission);
/// [`Error::Closed`] on a closed store.
pub fn serve_admin(
    store: &Store,
    addr: &str,
    options: AdminOptions,
) -> postbox::Result<AdminServer> {
    if store.is_closed() {
        return Err(Error::Closed);
    }
    let sock: SocketAddr = addr.parse().map_err(|_| {
        Error::InvalidArgument(format!("{addr:?} is not an address like 127.0.0.1:9090"))
    })?;
    let token = match (options.allow_actions, options.token) {
        (false, _) => None,
        (true, Some(t)) if t.is_empty() => {
            return Err(Error::InvalidArgument(
                "the admin token cannot be empty".into(),
            ));
        }
        (true, Some(t)) => Some(t),
        (true, None) => Some(random_token()?),
    };
    let http = tiny_http::Server::http(sock).map_err(|e| {
        Error::Io(std::io::Error::other(format!(
            "cannot listen on {addr}: {e}"
        )))
    })?;
    let addr = http
        .server_addr()
        .to_ip()
        .ok_or_else(|| Error::InvalidArgument("the admin endpoint needs an IP address".into()))?;
    let http = Arc::new(http);
    let (sampler, sampling) = Sampler::start(store.clone());
    let stopped = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Shared {
        store: store.clone(),
        token: token.clone(),
        sampler: sampler.clone(),
        extra_metrics: options.extra_metrics,
    });
    let accept = {
        let (http, stopped) = (http.clone(), stopped.clone());
        std::thread::Builder::new()
            .name("postbox-admin".into())
            .spawn(move || accept_loop(&http, &stopped, &shared))
            .map_err(Error::Io)?
    };
    tracing::info!(%addr, actions = token.is_some(), "admin endpoint listening");
    Ok(AdminServer {
        addr,
        token,
        http: Mutex::new(Some(http)),
        stopped,
        sampler,
        threads: Mutex::new(vec![accept, sampling]),
    })
}

fn random_token() -> postbox::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        Error::Io(std::io::Error::other(format!(
            "no randomness for a token: {e}"
        )))
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

struct Shared {
    store: Store,
    token: Option<String>,
    sampler: Arc<Sampler>,
    extra_metrics: Option<ExtraMetrics>,
}

fn accept_loop(http: &tiny_http::Server, stopped: &AtomicBool, shared: &Arc<Shared>) {
    loop {
        let request = match http.recv() {
            Ok(r) => r,
            Err(e) => {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                tracing::warn!(error = %e, "admin endpoint: accept failed");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        // One thread per request: a command may run for minutes; the page's reads are quick.
        let shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("postbox-admin-request".into())
            .spawn(move || handle(&shared, request));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "admin endpoint: no thread for a request");
        }
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).unwrap_or_else(|()| {
        Header::from_bytes(&b"X-Invalid"[..], &b"1"[..]).expect("static header")
    })
}

fn send_json(request: Request, status: u16, doc: &Value) {
    let body = doc.to_string();
    let response = Response::from_string(body)
        .with_status_code(StatusCode(status))
        .with_header(header("Content-Type", "application/json"))
        .with_header(header("Cache-Control", "no-store"));
    let _ = request.respond(response);
}

fn send_error(request: Request, status: u16, message: &str) {
    send_json(request, status, &json!({ "error": message }));
}

/// The query string's value of `key`, percent-decoded.
fn query(url: &str, key: &str) -> Option<String> {
    let q = url.split_once('?')?.1;
    q.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k) == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn token_ok(shared: &Shared, request: &Request) -> bool {
    let Some(want) = &shared.token else {
        return false;
    };
    request
        .headers()
        .iter()
        .find(|h| h.field.equiv("X-Postbox-Token"))
        .is_some_and(|h| h.value.as_str() == want)
}

fn handle(shared: &Shared, request: Request) {
    let url = request.url().to_owned();
    let path = url.split('?').next().unwrap_or("");
    match (request.method(), path) {
        (Method::Get, "/") | (Method::Get, "/index.html") => {
            let response = Response::from_string(page::HTML)
                .with_header(header("Content-Type", "text/html; charset=utf-8"))
                .with_header(header("Cache-Control", "no-store"));
            let _ = request.respond(response);
        }
        (Method::Get, "/metrics") => metrics_route(shared, request),
        (Method::Get, "/api/overview") => overview(shared, request),
        (Method::Get, "/api/dead-letters") => dead_letters(shared, request, &url),
        (Method::Post, "/api/resubmit") => resubmit(shared, request, &url),
        (Method::Post, "/api/command") => command(shared, request),
        (
            _,
            "/" | "/metrics" | "/api/overview" | "/api/dead-letters" | "/api/resubmit"
            | "/api/command",
        ) => send_error(request, 405, "method not allowed"),
        _ => send_error(request, 404, "no such page"),
    }
}

fn metrics_route(shared: &Shared, request: Request) {
    match sampler::take(&shared.store) {
        Ok(now) => {
            let before = shared.sampler.last();
            let mut body = metrics::render(&now, before.as_deref());
            if let Some(extra) = &shared.extra_metrics {
                body.push_str(&(extra.0)());
            }
            let response = Response::from_string(body).with_header(header(
                "Content-Type",
                "text/plain; version=0.0.4; charset=utf-8",
            ));
            let _ = request.respond(response);
        }
        Err(e) => send_error(request, 503, &e.to_string()),
    }
}

fn overview(shared: &Shared, request: Request) {
    let now = match sampler::take(&shared.store) {
        Ok(s) => s,
        Err(e) => return send_error(request, 503, &e.to_string()),
    };
    let history = shared.sampler.history();
    let last = history.last().cloned();
    let queues: Vec<Value> = now
        .queues
        .iter()
        .map(|q| {
            let r = last
                .as_deref()
                .map(|b| sampler::rates(b, &now, &q.name))
                .unwrap_or_default();
            // The counts as `postbox --json stats` writes them, and what the page adds.
            let mut doc = crate::inspect::stats_json(&q.stats);
            let extra = json!({
                "name": q.name,
                "oldest_age_seconds": q.head_age.map(|d| d.as_secs_f64()),
                "sent_total": q.traffic.sent,
                "completed_total": q.traffic.completed,
                "sends_per_second": r.sends,
                "completions_per_second": r.completions,
                "sessions": q.sessions.iter().map(|g| json!({
                    "group": g.group,
                    "messages": g.messages,
                    "held": g.locked_until.is_some(),
                    "has_state": g.has_state,
                })).collect::<Vec<_>>(),
            });
            if let (Some(d), Value::Object(e)) = (doc.as_object_mut(), extra) {
                d.extend(e);
            }
            doc
        })
        .collect();
    // The most recent jobs, newest first: the page shows their progress.
    let jobs: Vec<Value> = now
        .jobs
        .iter()
        .rev()
        .take(MAX_JOBS_SHOWN)
        .map(|j| {
            let p = &j.progress;
            json!({
                "id": j.id,
                "total": p.total,
                "completed": p.completed,
                "dead_lettered": p.dead_lettered,
                "pending": p.pending,
                "sealed": p.sealed,
                "done": p.done,
            })
        })
        .collect();
    // The charts: each sample's counts, and the rates between it and the one before.
    let points: Vec<Value> = history
        .windows(2)
        .map(|w| {
            let (b, a) = (&w[0], &w[1]);
            let per: serde_json::Map<String, Value> = a
                .queues
                .iter()
                .map(|q| {
                    let r = sampler::rates(b, a, &q.name);
                    (
                        q.name.clone(),
                        json!({
                            "active": q.stats.active,
                            "locked": q.stats.locked,
                            "dead_lettered": q.stats.dead_lettered,
                            "sends_per_second": r.sends,
                            "completions_per_second": r.completions,
                        }),
                    )
                })
                .collect();
            json!({ "at_ms": a.at_ms, "queues": per })
        })
        .collect();
    let s = &now.store;
    let doc = json!({
        "store": shared.store.path().display().to_string(),
        "multi_process": shared.store.is_multi_process(),
        "actions": shared.token.is_some(),
        "at_ms": now.at_ms,
        "store_stats": {
            "commits": s.commits,
            "operations": s.operations,
            "operations_per_commit": if s.commits == 0 { 0.0 } else { s.operations as f64 / s.commits as f64 },
            "log_file_bytes": now.log_file_bytes,
            "log_records": s.log_records,
            "checkpoints": s.checkpoints,
        },
        "topics": shared.store.topics().unwrap_or_default(),
        "queues": queues,
        "jobs": jobs,
        "jobs_total": now.jobs.len(),
        "history": points,
    });
    send_json(request, 200, &doc);
}

fn dead_letters(shared: &Shared, request: Request, url: &str) {
    let Some(name) = query(url, "queue") else {
        return send_error(request, 400, "which queue? ?queue=NAME");
    };
    let limit = query(url, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(100)
        .min(MAX_DEAD_LETTERS);
    let read = || -> postbox::Result<Vec<Value>> {
        let dlq = shared.store.open_queue(&name)?.dead_letters()?;
        let mut out = Vec::new();
        for env in dlq.browse().take(limit) {
            let env = env?;
            let mut doc = serde_json::to_value(Record::from_envelope(&env))
                .map_err(|e| Error::InvalidArgument(e.to_string()))?;
            // The page shows a short preview; the full body is for `postbox get`.
            doc["preview"] = json!(crate::record::preview(env.body(), 80));
            out.push(doc);
        }
        Ok(out)
    };
    match read() {
        Ok(list) => send_json(
            request,
            200,
            &json!({ "queue": name, "dead_letters": list }),
        ),
        Err(e) if e.kind() == ErrorKind::QueueNotFound => send_error(request, 404, &e.to_string()),
        Err(e) => send_error(request, 500, &e.to_string()),
    }
}

fn resubmit(shared: &Shared, request: Request, url: &str) {
    if shared.token.is_none() {
        return send_error(
            request,
            403,
            "actions are off: start the endpoint with actions allowed",
        );
    }
    if !token_ok(shared, &request) {
        return send_error(request, 403, "wrong or missing X-Postbox-Token");
    }
    let (Some(name), Some(id)) = (
        query(url, "queue"),
        query(url, "id").and_then(|i| i.parse::<u64>().ok()),
    ) else {
        return send_error(request, 400, "?queue=NAME&id=ID");
    };
    let act = || -> postbox::Result<bool> {
        let dlq = shared.store.open_queue(&name)?.dead_letters()?;
        match dlq.receive_by_id(MessageId(id), Duration::ZERO)? {
            Some(m) => {
                m.resubmit()?;
                Ok(true)
            }
            None => Ok(false),
        }
    };
    match act() {
        Ok(true) => send_json(request, 200, &json!({ "queue": name, "resubmitted": id })),
        Ok(false) => send_error(request, 404, &format!("no dead letter {id} in {name}")),
        Err(e) if e.kind() == ErrorKind::QueueNotFound => send_error(request, 404, &e.to_string()),
        Err(e) => send_error(request, 500, &e.to_string()),
    }
}

/// Runs a `postbox` command for `postbox --admin`, streaming its output as frames.
fn command(shared: &Shared, mut request: Request) {
    if request
        .body_length()
        .is_some_and(|n| n as u64 > MAX_REQUEST)
    {
        return send_error(request, 413, "request too large");
    }
    let mut body = Vec::new();
    if let Err(e) = request
        .as_reader()
        .take(MAX_REQUEST + 1)
        .read_to_end(&mut body)
    {
        return send_error(request, 400, &format!("cannot read the request: {e}"));
    }
    let req: wire::CommandRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return send_error(request, 400, &format!("not a command request: {e}")),
    };
    let stdin = match B64.decode(req.stdin_base64.as_bytes()) {
        Ok(b) => b,
        Err(e) => return send_error(request, 400, &format!("stdin_base64: {e}")),
    };
    let allowed = token_ok(shared, &request);
    let actions = shared.token.is_some();
    // From here the answer is a stream of frames, written on the raw connection so that each
    // frame reaches the caller as soon as it is written.
    let mut raw = request.into_writer();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-postbox-frames\r\n\
                Cache-Control: no-store\r\nConnection: close\r\n\r\n";
    if raw
        .write_all(head.as_bytes())
        .and_then(|()| raw.flush())
        .is_err()
    {
        return;
    }
    let console = io::Console::new(raw, stdin);
    io::enter(Some(console.clone()));
    // A command that writes nothing for a while (a paced redrive) would not notice its caller
    // leave; a heartbeat a few times a second does (see `wire`).
    let (done, beat) = std::sync::mpsc::channel::<()>();
    let heartbeat = {
        let console = console.clone();
        std::thread::Builder::new()
            .name("postbox-admin-heartbeat".into())
            .spawn(move || {
                // Ends as soon as `done` is dropped (the command finished).
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    beat.recv_timeout(HEARTBEAT_EVERY)
                {
                    console.send(wire::HEARTBEAT, &[]);
                }
            })
    };
    let code = match Cli::try_parse_from(&req.args) {
        Err(e) => {
            let code = if e.use_stderr() {
                fail::USAGE
            } else {
                fail::OK
            };
            let text = e.render().to_string();
            console.send(
                if code == fail::OK {
                    wire::OUT
                } else {
                    wire::ERR
                },
                text.as_bytes(),
            );
            code
        }
        Ok(cli) if cli.command.changes_store() && !actions => {
            let f = fail::Failure::usage(
                "this admin endpoint only reads: the application must serve it with actions \
                 allowed for commands that change the store",
            );
            crate::report(&f, cli.json);
            f.code
        }
        Ok(cli) if cli.command.changes_store() && !allowed => {
            let f = fail::Failure::usage(
                "wrong or missing admin token: pass --token TOKEN or set POSTBOX_ADMIN_TOKEN",
            );
            crate::report(&f, cli.json);
            f.code
        }
        Ok(cli) => {
            let json = cli.json;
            match crate::run_served(&shared.store, cli) {
                Ok(()) => fail::OK,
                Err(f) if f.code == fail::OK => fail::OK,
                Err(f) => {
                    crate::report(&f, json);
                    f.code
                }
            }
        }
    };
    drop(done);
    if let Ok(h) = heartbeat {
        let _ = h.join();
    }
    console.send(wire::EXIT, &code.to_le_bytes());
    io::enter(None);
}
