//! Routing and who may ask what.
//!
//! | route | what | needs |
//! |---|---|---|
//! | `GET /` | the dashboard page | — |
//! | `GET /metrics` | Prometheus text | — |
//! | `GET /api/overview` | counts, rates and two minutes of history, as JSON | — |
//! | `GET /api/dead-letters?queue=Q&limit=N` | a queue's dead letters (the JSON of `--json`) | token |
//! | `POST /api/resubmit?queue=Q&id=ID` | resubmits one dead letter | token, actions |
//! | `POST /api/command` | runs a `postbox` command for `postbox --admin` | token (and actions for changes) |
//!
//! Every request must name the endpoint in `Host` (`access`): a page that reached it by DNS
//! rebinding is refused with 421. The token travels in the `X-Postbox-Token` header, which a
//! cross-site form or simple request cannot send (a page's `fetch` with it needs a CORS
//! preflight, and no answer here ever allows one), so a page on another site can neither read
//! a message nor run a command. The open routes show counts and names (queues, session
//! groups, jobs, the store's path), never a message's body or properties.
//!
//! The HTTP server (`http`) bounds threads, connections, time and body sizes; a request for
//! `/api/command` is refused on its head (token, commands running) before its body is read.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use clap::Parser;
use postbox::{Error, ErrorKind, MessageId, Store};
use serde_json::{Value, json};

use super::http::{self, Exchange, Limits};
use super::sampler::{self, Sampler};
use super::{access, metrics, page};
use crate::commands::record::{self, Record};
use crate::commands::{self, Cli, inspect};
use crate::wire::{self, TOKEN_HEADER};
use crate::{fail, io};

/// How often a running command's stream carries a heartbeat.
const HEARTBEAT_EVERY: Duration = Duration::from_millis(200);
/// Jobs the page shows at most (the most recent).
const MAX_JOBS_SHOWN: usize = 20;
/// Dead letters the page lists at most.
const MAX_DEAD_LETTERS: usize = 1000;
/// Commands running at once; more are answered 503. Below the worker count, so that the
/// page and `/metrics` are served while commands stream (`stats --watch`).
const MAX_COMMANDS: usize = 4;

/// How [`serve_admin`] serves.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct AdminOptions {
    /// Allow actions: the dashboard's resubmit and purge buttons and `postbox --admin`
    /// commands that change the store. Off by default: commands and the page then only read.
    pub allow_actions: bool,
    /// The token that reading messages, running commands and actions need (the
    /// `X-Postbox-Token` header, `postbox --admin URL --token`); `None` makes a random one
    /// ([`AdminServer::token`]).
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
    /// Read-only serving (the default), with a random token.
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
    token: String,
    allow_actions: bool,
    http: http::Server,
    sampler: Arc<Sampler>,
    sampling: Mutex<Option<JoinHandle<()>>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AdminServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminServer")
            .field("addr", &self.http.addr())
            .field("actions", &self.allow_actions)
            .finish_non_exhaustive()
    }
}

impl AdminServer {
    /// The address it listens on (the real port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.http.addr()
    }

    /// The page's URL, `http://ADDR/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.http.addr())
    }

    /// The page's URL with the token in its fragment, `http://ADDR/#token=TOKEN`: the page
    /// reads it there (a fragment is never sent to the server) and lists dead letters.
    pub fn page_url(&self) -> String {
        format!("{}#token={}", self.url(), self.token)
    }

    /// The token that reading messages, commands and actions need: the one given in
    /// [`AdminOptions::token`], or a random one (32 hex digits).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether actions (changes to the store) are allowed.
    pub fn actions_allowed(&self) -> bool {
        self.allow_actions
    }

    /// Stops accepting (the listening socket closes), ends the sampler and waits for both.
    /// Commands still running for a remote caller are told to stop, as if their caller had
    /// gone, and end between two commits on their own threads. Calling it again does nothing.
    pub fn stop(&self) {
        self.http.stop();
        self.sampler.stop();
        let sampling = self
            .sampling
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = sampling {
            let _ = t.join();
        }
        let consoles = std::mem::take(
            &mut *self
                .shared
                .consoles
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for c in consoles.iter().filter_map(Weak::upgrade) {
            c.cancel();
        }
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serving the admin endpoint from a store: `store.serve_admin("127.0.0.1:9090")`.
pub trait ServeAdmin {
    /// Serves read-only on `addr` (`host:port`, port 0 for any free one), with a random
    /// token.
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
/// threads of its own until [`AdminServer::stop`] or drop: one that accepts connections, a
/// fixed pool of workers and a sampler, whatever its callers do (docs/security.md).
///
/// Counts (the page, `/api/overview`, `/metrics`) are open to any caller that names the
/// endpoint in `Host`; dead letters and commands need [`AdminServer::token`] in the
/// `X-Postbox-Token` header, and changes also need [`AdminOptions::allow_actions`].
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
    serve_with_limits(store, addr, options, Limits::DEFAULT)
}

/// [`serve_admin`] within `limits` (tests shorten the timeouts).
pub(crate) fn serve_with_limits(
    store: &Store,
    addr: &str,
    options: AdminOptions,
    limits: Limits,
) -> postbox::Result<AdminServer> {
    if store.is_closed() {
        return Err(Error::Closed);
    }
    let sock: SocketAddr = addr.parse().map_err(|_| {
        Error::InvalidArgument(format!("{addr:?} is not an address like 127.0.0.1:9090"))
    })?;
    let token = match options.token {
        Some(t) if t.is_empty() => {
            return Err(Error::InvalidArgument(
                "the admin token cannot be empty".into(),
            ));
        }
        Some(t) if t.contains(|c: char| !(c.is_ascii_graphic())) => {
            return Err(Error::InvalidArgument(
                "the admin token must be printable ASCII without spaces (it travels in a header)"
                    .into(),
            ));
        }
        Some(t) => t,
        None => random_token()?,
    };
    let (sampler, sampling) = Sampler::start(store.clone());
    let shared = Arc::new(Shared {
        store: store.clone(),
        token: token.clone(),
        allow_actions: options.allow_actions,
        addr: Mutex::new(sock),
        sampler: sampler.clone(),
        extra_metrics: options.extra_metrics,
        commands: AtomicUsize::new(0),
        consoles: Mutex::new(Vec::new()),
    });
    let handler = {
        let shared = shared.clone();
        Arc::new(move |ex: Exchange| handle(&shared, ex))
    };
    let http = match http::Server::start(sock, limits, handler) {
        Ok(h) => h,
        Err(e) => {
            sampler.stop();
            let _ = sampling.join();
            return Err(Error::Io(std::io::Error::new(
                e.kind(),
                format!("cannot listen on {addr}: {e}"),
            )));
        }
    };
    // The real port, for the Host check of a server asked for port 0.
    *shared.addr.lock().unwrap_or_else(PoisonError::into_inner) = http.addr();
    tracing::info!(addr = %http.addr(), actions = options.allow_actions, "admin endpoint listening");
    Ok(AdminServer {
        token,
        allow_actions: options.allow_actions,
        http,
        sampler,
        sampling: Mutex::new(Some(sampling)),
        shared,
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
    token: String,
    allow_actions: bool,
    addr: Mutex<SocketAddr>,
    sampler: Arc<Sampler>,
    extra_metrics: Option<ExtraMetrics>,
    /// Commands running now.
    commands: AtomicUsize,
    /// The consoles of running commands, told to stop at [`AdminServer::stop`].
    consoles: Mutex<Vec<Weak<io::Console>>>,
}

fn send_json(ex: Exchange, status: u16, doc: &Value) {
    ex.respond(
        status,
        &[("Content-Type", "application/json")],
        doc.to_string().as_bytes(),
    );
}

/// Whether the request carries the token.
fn token_ok(shared: &Shared, ex: &Exchange) -> bool {
    ex.request
        .header(TOKEN_HEADER)
        .is_some_and(|t| access::token_matches(t, &shared.token))
}

const WRONG_TOKEN: &str = "wrong or missing X-Postbox-Token";

/// The page's own policy: its script and style are inline, it talks only to this endpoint,
/// and no other page may frame it.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

fn handle(shared: &Shared, ex: Exchange) {
    let bound = *shared.addr.lock().unwrap_or_else(PoisonError::into_inner);
    match ex.request.header("host") {
        Some(host) if access::host_allowed(host, bound) => {}
        Some(host) => {
            let text = format!(
                "Host {host:?} is not this endpoint's address: open it as http://{bound}/ \
                 or http://localhost:{}/",
                bound.port()
            );
            return ex.respond_error(421, &text);
        }
        None => return ex.respond_error(400, "one Host header is required"),
    }
    let method = ex.request.method.clone();
    let path = ex.request.path().to_owned();
    match (method.as_str(), path.as_str()) {
        ("GET", "/" | "/index.html") => ex.respond(
            200,
            &[
                ("Content-Type", "text/html; charset=utf-8"),
                ("Content-Security-Policy", PAGE_POLICY),
            ],
            page::HTML.as_bytes(),
        ),
        ("GET", "/metrics") => metrics_route(shared, ex),
        ("GET", "/api/overview") => overview(shared, ex),
        ("GET", "/api/dead-letters") => dead_letters(shared, ex),
        ("POST", "/api/resubmit") => resubmit(shared, ex),
        ("POST", "/api/command") => command(shared, ex),
        (
            _,
            "/" | "/index.html" | "/metrics" | "/api/overview" | "/api/dead-letters"
            | "/api/resubmit" | "/api/command",
        ) => ex.respond_error(405, "method not allowed"),
        _ => ex.respond_error(404, "no such page"),
    }
}

fn metrics_route(shared: &Shared, ex: Exchange) {
    match sampler::take(&shared.store) {
        Ok(now) => {
            let pair = shared.sampler.last_two();
            let mut body = metrics::render(&now, pair.as_ref().map(|(b, a)| (&**b, &**a)));
            if let Some(extra) = &shared.extra_metrics {
                body.push_str(&(extra.0)());
            }
            ex.respond(
                200,
                &[("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
                body.as_bytes(),
            );
        }
        Err(e) => ex.respond_error(503, &e.to_string()),
    }
}

fn overview(shared: &Shared, ex: Exchange) {
    let now = match sampler::take(&shared.store) {
        Ok(s) => s,
        Err(e) => return ex.respond_error(503, &e.to_string()),
    };
    let history = shared.sampler.history();
    // Rates between the last two samples, a whole interval apart; counts from `now`.
    let pair = match history.as_slice() {
        [.., b, a] => Some((b.clone(), a.clone())),
        _ => None,
    };
    let rates_of = |name: &str| {
        pair.as_ref()
            .map(|(b, a)| sampler::rates(b, a, name))
            .unwrap_or_default()
    };
    let queues: Vec<Value> = now
        .queues
        .iter()
        .map(|q| {
            let r = rates_of(&q.name);
            // The counts as `postbox --json stats` writes them, and what the page adds.
            let mut doc = inspect::stats_json(&q.stats);
            let extra = json!({
                "name": q.name,
                "oldest_age_seconds": q.head_age.map(|d| d.as_secs_f64()),
                "sent_total": q.traffic.sent,
                "completed_total": q.traffic.completed,
                "sends_per_second": r.sends,
                "completions_per_second": r.completions,
                "net_per_second": r.net,
                "dead_lettered_per_second": r.dead_lettered,
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
                            "net_per_second": r.net,
                            "dead_lettered_per_second": r.dead_lettered,
                        }),
                    )
                })
                .collect();
            json!({ "at_ms": a.at_ms, "queues": per })
        })
        .collect();
    // The whole store, from the counts every process keeps exact in the file.
    let (mut net, mut dead_net) = (0.0, 0.0);
    for q in &now.queues {
        let r = rates_of(&q.name);
        net += r.net;
        dead_net += r.dead_lettered;
    }
    let s = &now.store;
    let doc = json!({
        "store": shared.store.path().display().to_string(),
        "multi_process": shared.store.is_multi_process(),
        "actions": shared.allow_actions,
        "at_ms": now.at_ms,
        "all_processes": {
            "messages": now.queues.iter().map(|q| sampler::held(&q.stats)).sum::<u64>(),
            "dead_lettered": now.queues.iter().map(|q| q.stats.dead_lettered).sum::<u64>(),
            "net_per_second": net,
            "dead_lettered_per_second": dead_net,
        },
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
    send_json(ex, 200, &doc);
}

fn dead_letters(shared: &Shared, ex: Exchange) {
    if !token_ok(shared, &ex) {
        return ex.respond_error(403, WRONG_TOKEN);
    }
    let Some(name) = ex.request.query("queue") else {
        return ex.respond_error(400, "which queue? ?queue=NAME");
    };
    let limit = ex
        .request
        .query("limit")
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
            doc["preview"] = json!(record::preview(env.body(), 80));
            out.push(doc);
        }
        Ok(out)
    };
    match read() {
        Ok(list) => send_json(ex, 200, &json!({ "queue": name, "dead_letters": list })),
        Err(e) if e.kind() == ErrorKind::QueueNotFound => ex.respond_error(404, &e.to_string()),
        Err(e) => ex.respond_error(500, &e.to_string()),
    }
}

fn resubmit(shared: &Shared, ex: Exchange) {
    if !token_ok(shared, &ex) {
        return ex.respond_error(403, WRONG_TOKEN);
    }
    if !shared.allow_actions {
        return ex.respond_error(
            403,
            "actions are off: start the endpoint with actions allowed",
        );
    }
    let (Some(name), Some(id)) = (
        ex.request.query("queue"),
        ex.request.query("id").and_then(|i| i.parse::<u64>().ok()),
    ) else {
        return ex.respond_error(400, "?queue=NAME&id=ID");
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
        Ok(true) => send_json(ex, 200, &json!({ "queue": name, "resubmitted": id })),
        Ok(false) => ex.respond_error(404, &format!("no dead letter {id} in {name}")),
        Err(e) if e.kind() == ErrorKind::QueueNotFound => ex.respond_error(404, &e.to_string()),
        Err(e) => ex.respond_error(500, &e.to_string()),
    }
}

/// Counts a running command; the count drops when it is dropped.
struct CommandSlot<'a>(&'a AtomicUsize);

impl<'a> CommandSlot<'a> {
    fn take(count: &'a AtomicUsize) -> Option<CommandSlot<'a>> {
        count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_COMMANDS).then_some(n + 1)
            })
            .ok()
            .map(|_| CommandSlot(count))
    }
}

impl Drop for CommandSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs a `postbox` command for `postbox --admin`, streaming its output as frames.
fn command(shared: &Shared, mut ex: Exchange) {
    // Refused on the head: an unauthenticated body is never read.
    if !token_ok(shared, &ex) {
        return ex.respond_error(403, WRONG_TOKEN);
    }
    let Some(_slot) = CommandSlot::take(&shared.commands) else {
        return ex.respond_error(
            503,
            &format!("{MAX_COMMANDS} commands are running already; try again when one ends"),
        );
    };
    let body = match ex.read_body(wire::MAX_REQUEST) {
        Ok(b) => b,
        Err(e) => {
            let (status, text) = e.status();
            return ex.respond_error(status, &text);
        }
    };
    let req: wire::CommandRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return ex.respond_error(400, &format!("not a command request: {e}")),
    };
    drop(body);
    let stdin = match B64.decode(req.stdin_base64.as_bytes()) {
        Ok(b) => b,
        Err(e) => return ex.respond_error(400, &format!("stdin_base64: {e}")),
    };
    // From here the answer is a stream of frames, each reaching the caller as it is written.
    let Ok(raw) = ex.stream(&[("Content-Type", "application/x-postbox-frames")]) else {
        return;
    };
    let console = io::Console::new(Box::new(std::io::BufWriter::new(raw)), stdin);
    {
        let mut consoles = shared
            .consoles
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        consoles.retain(|c| c.strong_count() > 0);
        consoles.push(Arc::downgrade(&console));
    }
    // Left when the command ends, even by a panic (the worker serves on).
    let _entered = io::entered(console.scope());
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
        Ok(cli) if cli.command.changes_store() && !shared.allow_actions => {
            let f = fail::Failure::usage(
                "this admin endpoint only reads: the application must serve it with actions \
                 allowed for commands that change the store",
            );
            commands::report(&f, cli.json);
            f.code
        }
        Ok(cli) => {
            let json = cli.json;
            match commands::run_served(&shared.store, cli) {
                Ok(()) => fail::OK,
                Err(f) if f.code == fail::OK => fail::OK,
                Err(f) => {
                    commands::report(&f, json);
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
}
