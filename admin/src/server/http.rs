//! A small HTTP/1.1 server whose resources are bounded whatever its callers do: a fixed pool
//! of worker threads, a bounded number of connections, timeouts on every read, and request
//! bodies read only on demand, up to a cap, as they arrive.
//!
//! - One thread (`postbox-admin`) accepts connections and reads their request heads. A
//!   connection costs a socket and a small buffer until its head is complete, never a thread:
//!   sockets are non-blocking and the thread polls the ones waiting, napping between rounds
//!   that made no progress (1 to 10 ms; it blocks in `accept` when none waits). At most
//!   [`Limits::max_pending`] connections wait for their head; one more closes the oldest. A
//!   head larger than [`Limits::max_head`] is refused (431); a connection that sends nothing
//!   for [`Limits::idle_timeout`], or whose head is not complete within
//!   [`Limits::header_timeout`] of its acceptance (a trickle), is closed (408 when it had
//!   begun).
//! - A complete head goes to a queue of at most [`Limits::queue`] requests that
//!   [`Limits::workers`] threads (`postbox-admin-worker`) serve; a full queue is answered 503 at
//!   once. The handler decides whether to read the body ([`Exchange::read_body`], with a cap),
//!   so a request refused on its head costs no body. Bodies (`Content-Length` or chunked) are
//!   read with the idle timeout between bytes and [`Limits::body_timeout`] in all.
//! - Every answer closes the connection (`Connection: close`). When the request's body was not
//!   read, the connection is half-closed and drained for at most [`Limits::linger`] first, so
//!   that the client reads the answer instead of a reset.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The bounds a server keeps.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Threads serving complete requests.
    pub workers: usize,
    /// Complete requests waiting for a worker; more are answered 503.
    pub queue: usize,
    /// Connections whose request head is still arriving; one more closes the oldest.
    pub max_pending: usize,
    /// Largest request head (request line and headers), in bytes.
    pub max_head: usize,
    /// Time from acceptance to a complete head.
    pub header_timeout: Duration,
    /// Longest wait for the next byte (of a head or a body).
    pub idle_timeout: Duration,
    /// Time from the head to a complete body.
    pub body_timeout: Duration,
    /// Longest wait for one write to make progress (a caller that stops reading).
    pub write_timeout: Duration,
    /// How long an unread body is drained after the answer.
    pub linger: Duration,
}

impl Limits {
    /// The admin endpoint's bounds (docs/security.md lists them).
    pub const DEFAULT: Limits = Limits {
        workers: 8,
        queue: 32,
        max_pending: 256,
        max_head: 16 << 10,
        header_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(5),
        body_timeout: Duration::from_secs(30),
        write_timeout: Duration::from_secs(30),
        linger: Duration::from_secs(1),
    };
}

/// Headers a request may have at most.
const MAX_HEADERS: usize = 100;
/// Longest line of a chunked body's framing (a chunk's size, a trailer).
const MAX_CHUNK_LINE: usize = 1024;
/// Bytes drained at most from an unread body after the answer.
const LINGER_BYTES: usize = 1 << 20;
/// The listening thread's naps between polling rounds that made no progress.
const MIN_NAP: Duration = Duration::from_millis(1);
const MAX_NAP: Duration = Duration::from_millis(10);

/// How a request's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A request's head.
#[derive(Debug)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The request target as sent: path and query.
    pub target: String,
    headers: Vec<(String, String)>,
    framing: Framing,
    expect_continue: bool,
}

impl Request {
    /// The value of header `name` (case-insensitive) when it appears exactly once.
    pub fn header(&self, name: &str) -> Option<&str> {
        let mut found = self
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name));
        match (found.next(), found.next()) {
            (Some((_, v)), None) => Some(v),
            _ => None,
        }
    }

    /// How many times header `name` appears.
    pub fn header_count(&self, name: &str) -> usize {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .count()
    }

    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// The query string's value of `key`, percent-decoded.
    pub fn query(&self, key: &str) -> Option<String> {
        let q = self.target.split_once('?')?.1;
        q.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k) == key).then(|| percent_decode(v))
        })
    }
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

/// Why a head was refused: the status and a short text.
type Refusal = (u16, &'static str);

/// Parses a complete head (without its blank line).
fn parse_head(head: &[u8]) -> Result<Request, Refusal> {
    let text = std::str::from_utf8(head).map_err(|_| (400, "the request head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err((400, "not an HTTP request line"));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err((400, "not an HTTP method"));
    }
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err((505, "only HTTP/1.0 and HTTP/1.1 are served"));
    }
    // Origin form only: this is no proxy (and an absolute URI would name a host of its own).
    if !target.starts_with('/') {
        return Err((400, "the request target must be a path"));
    }
    let mut headers = Vec::new();
    for line in lines {
        if line.starts_with([' ', '\t']) {
            return Err((400, "folded header lines are not accepted"));
        }
        let (name, value) = line
            .split_once(':')
            .ok_or((400, "a header line without a colon"))?;
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err((400, "a header name that is not a token"));
        }
        if headers.len() == MAX_HEADERS {
            return Err((431, "too many headers"));
        }
        headers.push((name.to_owned(), value.trim_matches([' ', '\t']).to_owned()));
    }
    let mut request = Request {
        method: method.to_owned(),
        target: target.to_owned(),
        headers,
        framing: Framing::None,
        expect_continue: false,
    };
    request.framing = framing(&request)?;
    request.expect_continue = version == "HTTP/1.1"
        && request
            .header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    Ok(request)
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The body's framing; both, or anything ambiguous, is refused (no request smuggling).
fn framing(request: &Request) -> Result<Framing, Refusal> {
    let te = request.header_count("transfer-encoding");
    let cl = request.header_count("content-length");
    match (te, cl) {
        (0, 0) => Ok(Framing::None),
        (1, 0) => match request.header("transfer-encoding") {
            Some(v) if v.eq_ignore_ascii_case("chunked") => Ok(Framing::Chunked),
            _ => Err((501, "only the chunked transfer encoding is accepted")),
        },
        (0, 1) => {
            let v = request.header("content-length").unwrap_or("");
            if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err((400, "a Content-Length that is not a number"));
            }
            match v.parse::<u64>() {
                Ok(0) => Ok(Framing::None),
                Ok(n) => Ok(Framing::Length(n)),
                Err(_) => Err((400, "a Content-Length that is not a number")),
            }
        }
        _ => Err((
            400,
            "one Content-Length or one Transfer-Encoding, not both or several",
        )),
    }
}

/// Why a body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// Larger than the cap (known from `Content-Length`, or counted as it arrived).
    TooLarge,
    /// Not complete in time, or a pause longer than the idle timeout.
    Timeout,
    /// Framing that does not parse.
    Malformed(&'static str),
    /// The connection failed or closed early.
    Io(io::Error),
}

impl BodyError {
    /// The status that answers it, and a short text.
    pub fn status(&self) -> (u16, String) {
        match self {
            BodyError::TooLarge => (413, "the request body is too large".into()),
            BodyError::Timeout => (408, "the request body did not arrive in time".into()),
            BodyError::Malformed(why) => (400, (*why).to_owned()),
            BodyError::Io(e) => (400, format!("cannot read the request body: {e}")),
        }
    }
}

/// One request and its connection, handed to the handler on a worker thread. Answer it with
/// [`Exchange::respond`] or [`Exchange::stream`]; dropped unanswered, it closes.
pub struct Exchange {
    /// The request's head.
    pub request: Request,
    stream: TcpStream,
    /// Bytes read past the head (the body's beginning).
    early: Vec<u8>,
    limits: Limits,
    /// Whether the body (if any) was read to its end.
    body_read: bool,
}

/// Headers every answer carries: no caching, no sniffing, no framing by other pages, no
/// referrer; and never an `Access-Control-Allow-*`.
const COMMON_HEADERS: &str = "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\
     X-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\nConnection: close\r\n";

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

fn head_bytes(status: u16, headers: &[(&str, &str)], length: Option<usize>) -> Vec<u8> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n{COMMON_HEADERS}", reason(status));
    for (k, v) in headers {
        // Values are this module's callers' own; a line break would split the head.
        if !v.contains(['\r', '\n']) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    if let Some(n) = length {
        head.push_str(&format!("Content-Length: {n}\r\n"));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

fn json_error(status: u16, message: &str) -> Vec<u8> {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut out = head_bytes(
        status,
        &[("Content-Type", "application/json")],
        Some(body.len()),
    );
    out.extend_from_slice(body.as_bytes());
    out
}

impl Exchange {
    /// Reads the whole body, at most `cap` bytes: a larger `Content-Length` is refused
    /// before a byte is read, and a chunked body is counted as it arrives and cut at `cap`.
    ///
    /// # Errors
    ///
    /// [`BodyError`]; answer it with its [`BodyError::status`].
    pub fn read_body(&mut self, cap: usize) -> Result<Vec<u8>, BodyError> {
        if let Framing::Length(n) = self.request.framing
            && n > cap as u64
        {
            return Err(BodyError::TooLarge);
        }
        if self.request.framing == Framing::None {
            self.body_read = true;
            return Ok(Vec::new());
        }
        if self.request.expect_continue && self.early.is_empty() {
            self.stream
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .map_err(BodyError::Io)?;
        }
        let mut reader = BodyReader {
            stream: &mut self.stream,
            early: std::mem::take(&mut self.early),
            at: 0,
            deadline: Instant::now() + self.limits.body_timeout,
            idle: self.limits.idle_timeout,
        };
        let body = match self.request.framing {
            Framing::Length(n) => {
                // n <= cap: checked above.
                let mut body = vec![0u8; usize::try_from(n).map_err(|_| BodyError::TooLarge)?];
                reader.read_exact(&mut body)?;
                body
            }
            Framing::Chunked => read_chunked(&mut reader, cap)?,
            Framing::None => Vec::new(),
        };
        self.body_read = true;
        Ok(body)
    }

    /// Answers with `status`, `headers` and `body`, and closes.
    pub fn respond(mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let mut out = head_bytes(status, headers, Some(body.len()));
        out.extend_from_slice(body);
        let _ = self
            .stream
            .write_all(&out)
            .and_then(|()| self.stream.flush());
        self.close();
    }

    /// Answers with `status` and `{"error": message}`, and closes.
    pub fn respond_error(mut self, status: u16, message: &str) {
        let _ = self.stream.write_all(&json_error(status, message));
        self.close();
    }

    /// Writes the head of a `200` answer without a length and hands over the connection for
    /// the body, which ends when the connection closes. Call it after
    /// [`Exchange::read_body`]: an unread body would reset the connection at its close.
    ///
    /// # Errors
    ///
    /// The write's.
    pub fn stream(mut self, headers: &[(&str, &str)]) -> io::Result<TcpStream> {
        self.stream.write_all(&head_bytes(200, headers, None))?;
        self.stream.flush()?;
        Ok(self.stream)
    }

    /// Closes, first draining an unread body for a moment so that the answer is not lost to
    /// a reset.
    fn close(self) {
        if self.body_read || self.request.framing == Framing::None {
            return;
        }
        let mut stream = self.stream;
        if stream.shutdown(Shutdown::Write).is_err() {
            return;
        }
        let deadline = Instant::now() + self.limits.linger;
        let mut buf = [0u8; 16 << 10];
        let mut drained = 0;
        while drained < LINGER_BYTES {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
                return;
            }
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => drained += n,
            }
        }
    }
}

/// Reads a body from the bytes that came with the head, then from the connection, within
/// the idle timeout between bytes and the body's deadline in all.
struct BodyReader<'a> {
    stream: &'a mut TcpStream,
    early: Vec<u8>,
    at: usize,
    deadline: Instant,
    idle: Duration,
}

impl BodyReader<'_> {
    fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, BodyError> {
        if self.at < self.early.len() {
            let n = buf.len().min(self.early.len() - self.at);
            buf[..n].copy_from_slice(&self.early[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(BodyError::Timeout);
        }
        self.stream
            .set_read_timeout(Some(left.min(self.idle)))
            .map_err(BodyError::Io)?;
        loop {
            match self.stream.read(buf) {
                Ok(0) => {
                    return Err(BodyError::Io(io::ErrorKind::UnexpectedEof.into()));
                }
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(BodyError::Timeout);
                }
                Err(e) => return Err(BodyError::Io(e)),
            }
        }
    }

    fn read_exact(&mut self, mut buf: &mut [u8]) -> Result<(), BodyError> {
        while !buf.is_empty() {
            let n = self.read_some(buf)?;
            buf = &mut buf[n..];
        }
        Ok(())
    }

    fn byte(&mut self) -> Result<u8, BodyError> {
        let mut b = [0u8; 1];
        self.read_exact(&mut b)?;
        Ok(b[0])
    }

    /// One CRLF-terminated line of the chunked framing, without its CRLF.
    fn line(&mut self) -> Result<Vec<u8>, BodyError> {
        let mut line = Vec::new();
        loop {
            match self.byte()? {
                b'\n' => {
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    return Ok(line);
                }
                b => {
                    if line.len() == MAX_CHUNK_LINE {
                        return Err(BodyError::Malformed("a chunked body's line is too long"));
                    }
                    line.push(b);
                }
            }
        }
    }
}

/// Reads a chunked body, refusing it as soon as its chunks would pass `cap`.
fn read_chunked(r: &mut BodyReader<'_>, cap: usize) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    loop {
        let line = r.line()?;
        let size = line.split(|&b| b == b';').next().unwrap_or(&[]);
        let size = std::str::from_utf8(size)
            .ok()
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= 16)
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or(BodyError::Malformed("a chunk size that is not hexadecimal"))?;
        if size == 0 {
            // Trailers, up to the blank line; ignored.
            let mut trailers = 0;
            while !r.line()?.is_empty() {
                trailers += 1;
                if trailers > MAX_HEADERS {
                    return Err(BodyError::Malformed("too many trailers"));
                }
            }
            return Ok(body);
        }
        let end = u64::try_from(body.len())
            .ok()
            .and_then(|n| n.checked_add(size))
            .filter(|&end| end <= cap as u64)
            .ok_or(BodyError::TooLarge)?;
        let start = body.len();
        body.resize(usize::try_from(end).map_err(|_| BodyError::TooLarge)?, 0);
        r.read_exact(&mut body[start..])?;
        if !r.line()?.is_empty() {
            return Err(BodyError::Malformed("a chunk longer than its size"));
        }
    }
}

/// What serves each request, on a worker thread.
pub type Handler = dyn Fn(Exchange) + Send + Sync;

/// A running server; [`Server::stop`] ends it.
pub struct Server {
    addr: SocketAddr,
    stopped: Arc<AtomicBool>,
    listening: Mutex<Option<JoinHandle<()>>>,
}

impl Server {
    /// Listens on `addr` and serves each request with `handler`, within `limits`.
    ///
    /// # Errors
    ///
    /// The bind's, or a thread that cannot start.
    pub fn start(addr: SocketAddr, limits: Limits, handler: Arc<Handler>) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stopped = Arc::new(AtomicBool::new(false));
        let (jobs, queue) = std::sync::mpsc::sync_channel::<Job>(limits.queue);
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..limits.workers.max(1) {
            let (queue, handler) = (queue.clone(), handler.clone());
            // Detached: a worker ends when the listening thread has gone and the queue is
            // empty, or when its request does (a long command may outlive `stop`).
            std::thread::Builder::new()
                .name("postbox-admin-worker".into())
                .spawn(move || work(&queue, &*handler, limits))?;
        }
        let listening = {
            let stopped = stopped.clone();
            std::thread::Builder::new()
                .name("postbox-admin".into())
                .spawn(move || listen(&listener, limits, &stopped, &jobs))?
        };
        Ok(Server {
            addr,
            stopped,
            listening: Mutex::new(Some(listening)),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and closes the listening socket and the connections whose head is
    /// still arriving; requests being served finish on their workers, which then end.
    /// Calling it again does nothing.
    pub fn stop(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        // The listening thread may be blocked in `accept`: a connection wakes it.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let Some(handle) = self
            .listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        if handle.is_finished() || TcpStream::connect_timeout(&wake, Duration::from_secs(2)).is_ok()
        {
            let _ = handle.join();
        } else {
            tracing::warn!(addr = %self.addr, "admin endpoint: could not wake the listening thread; it ends at the next connection");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A request whose head is complete, waiting for a worker.
struct Job {
    stream: TcpStream,
    request: Request,
    early: Vec<u8>,
}

fn work(queue: &Mutex<Receiver<Job>>, handler: &Handler, limits: Limits) {
    loop {
        let job = {
            let queue = queue.lock().unwrap_or_else(PoisonError::into_inner);
            queue.recv()
        };
        let Ok(job) = job else { return };
        let stream = job.stream;
        if stream.set_nonblocking(false).is_err()
            || stream
                .set_write_timeout(Some(limits.write_timeout))
                .is_err()
            || stream.set_read_timeout(Some(limits.idle_timeout)).is_err()
        {
            continue;
        }
        let _ = stream.set_nodelay(true);
        let exchange = Exchange {
            request: job.request,
            stream,
            early: job.early,
            limits,
            body_read: false,
        };
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(exchange)));
        if served.is_err() {
            tracing::error!("admin endpoint: a request's handler panicked");
        }
    }
}

/// A connection whose head is still arriving.
struct Pending {
    stream: TcpStream,
    buf: Vec<u8>,
    accepted: Instant,
    last: Instant,
}

enum Step {
    /// Nothing new.
    Wait,
    /// Bytes arrived; the head is not complete yet.
    Progress,
    /// The head is complete.
    Ready(Request, Vec<u8>),
    /// Answer this and close.
    Refuse(Refusal),
    /// Close without a word (closed by the peer, or never began).
    Drop,
}

impl Pending {
    fn step(&mut self, now: Instant, limits: &Limits) -> Step {
        let mut chunk = [0u8; 4096];
        let mut progress = false;
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Step::Drop,
                Ok(n) => {
                    let from = self.buf.len().saturating_sub(3);
                    self.buf.extend_from_slice(&chunk[..n]);
                    self.last = now;
                    progress = true;
                    if let Some(end) = find_blank_line(&self.buf, from) {
                        if end > limits.max_head {
                            return Step::Refuse((431, "the request head is too large"));
                        }
                        let early = self.buf.split_off(end + 4);
                        self.buf.truncate(end);
                        return match parse_head(&self.buf) {
                            Ok(r) => Step::Ready(r, early),
                            Err(refusal) => Step::Refuse(refusal),
                        };
                    }
                    if self.buf.len() > limits.max_head {
                        return Step::Refuse((431, "the request head is too large"));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Drop,
            }
        }
        if progress {
            return Step::Progress;
        }
        let silent = now.duration_since(self.last) > limits.idle_timeout;
        let late = now.duration_since(self.accepted) > limits.header_timeout;
        match (self.buf.is_empty(), silent || late) {
            (_, false) => Step::Wait,
            (true, true) => Step::Drop,
            (false, true) => Step::Refuse((408, "the request head did not arrive in time")),
        }
    }
}

fn find_blank_line(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + from)
}

/// Writes a refusal on a non-blocking connection: it is small, and a peer that does not take
/// it loses it.
fn refuse(mut stream: TcpStream, (status, message): Refusal) {
    let _ = stream.write_all(&json_error(status, message));
}

fn listen(listener: &TcpListener, limits: Limits, stopped: &AtomicBool, jobs: &SyncSender<Job>) {
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut nap = MIN_NAP;
    let admit = |pending: &mut VecDeque<Pending>, stream: TcpStream| {
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        if pending.len() >= limits.max_pending.max(1) {
            // The oldest has had the longest to send its head.
            pending.pop_front();
        }
        let now = Instant::now();
        pending.push_back(Pending {
            stream,
            buf: Vec::new(),
            accepted: now,
            last: now,
        });
    };
    while !stopped.load(Ordering::SeqCst) {
        let mut progress = false;
        if pending.is_empty() {
            // Nothing to poll: wait for a connection without spinning.
            if listener.set_nonblocking(false).is_err() {
                return;
            }
            match listener.accept() {
                Ok((stream, _)) => {
                    if stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    admit(&mut pending, stream);
                    progress = true;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "admin endpoint: accept failed");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
            if listener.set_nonblocking(true).is_err() {
                return;
            }
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    admit(&mut pending, stream);
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors, typically: the connections waiting are served
                    // meanwhile, and the next round tries again.
                    tracing::warn!(error = %e, "admin endpoint: accept failed");
                    break;
                }
            }
        }
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        let now = Instant::now();
        let mut i = 0;
        while i < pending.len() {
            match pending[i].step(now, &limits) {
                Step::Wait => i += 1,
                Step::Progress => {
                    progress = true;
                    i += 1;
                }
                step => {
                    progress = true;
                    let Some(p) = pending.remove(i) else { break };
                    match step {
                        Step::Ready(request, early) => {
                            let job = Job {
                                stream: p.stream,
                                request,
                                early,
                            };
                            match jobs.try_send(job) {
                                Ok(()) => {}
                                Err(TrySendError::Full(job)) => refuse(
                                    job.stream,
                                    (503, "the admin endpoint is busy; try again"),
                                ),
                                Err(TrySendError::Disconnected(_)) => return,
                            }
                        }
                        Step::Refuse(refusal) => refuse(p.stream, refusal),
                        _ => {}
                    }
                }
            }
        }
        if progress {
            nap = MIN_NAP;
        } else {
            std::thread::sleep(nap);
            nap = (nap * 2).min(MAX_NAP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Short bounds, so that each can be waited for.
    const TEST: Limits = Limits {
        workers: 2,
        queue: 2,
        max_pending: 4,
        max_head: 1024,
        header_timeout: Duration::from_millis(800),
        idle_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(800),
        write_timeout: Duration::from_secs(5),
        linger: Duration::from_millis(500),
    };

    /// A server whose `/echo` answers the length of a body of at most 1 KiB, and whose
    /// `/hold` waits until `release` says so.
    fn serve(limits: Limits) -> (Server, std::sync::mpsc::Sender<()>) {
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Mutex::new(held);
        let handler = Arc::new(move |mut ex: Exchange| match ex.request.path() {
            "/echo" => match ex.read_body(1024) {
                Ok(b) => ex.respond(200, &[], b.len().to_string().as_bytes()),
                Err(e) => {
                    let (status, text) = e.status();
                    ex.respond_error(status, &text);
                }
            },
            "/hold" => {
                let _ = held.lock().unwrap().recv();
                ex.respond(200, &[], b"held");
            }
            _ => ex.respond(200, &[], b"ok"),
        });
        let server = Server::start("127.0.0.1:0".parse().unwrap(), limits, handler).unwrap();
        (server, release)
    }

    fn connect(server: &Server) -> TcpStream {
        let s = TcpStream::connect(server.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Everything the server sends until it closes (a reset counts as the end).
    fn answer(mut s: TcpStream) -> String {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("no answer: {e}"),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    fn status(answer: &str) -> u16 {
        answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
    }

    fn ask(server: &Server, request: &str) -> String {
        let mut s = connect(server);
        s.write_all(request.as_bytes()).unwrap();
        answer(s)
    }

    #[test]
    fn a_silent_connection_is_closed_after_the_idle_timeout() {
        let (server, _release) = serve(TEST);
        let s = connect(&server);
        let t = Instant::now();
        assert_eq!(answer(s), "", "closed without a word");
        let waited = t.elapsed();
        assert!(waited >= TEST.idle_timeout, "{waited:?}");
        assert!(
            waited < TEST.header_timeout + Duration::from_secs(2),
            "{waited:?}"
        );
    }

    #[test]
    fn a_trickled_head_is_cut_at_the_header_timeout() {
        let (server, _release) = serve(TEST);
        let mut s = connect(&server);
        let t = Instant::now();
        // A byte every 100 ms is never idle for 300 ms, but the head never ends.
        let reader = s.try_clone().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let trickle = {
            let done = done.clone();
            std::thread::spawn(move || {
                for b in b"GET / HTTP/1.1\r\nX-Slow: "
                    .iter()
                    .chain([b'a'; 100].iter())
                {
                    if done.load(Ordering::SeqCst) || s.write_all(&[*b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        let got = answer(reader);
        done.store(true, Ordering::SeqCst);
        trickle.join().unwrap();
        assert_eq!(status(&got), 408, "{got}");
        let waited = t.elapsed();
        assert!(waited >= TEST.header_timeout, "{waited:?}");
        assert!(
            waited < TEST.header_timeout + Duration::from_secs(2),
            "{waited:?}"
        );
    }

    #[test]
    fn a_large_head_is_refused() {
        let (server, _release) = serve(TEST);
        let got = ask(
            &server,
            &format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(2000)),
        );
        assert_eq!(status(&got), 431, "{got}");
        let got = ask(&server, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(status(&got), 200, "{got}");
        assert!(got.contains("Connection: close\r\n"));
        assert!(!got.to_ascii_lowercase().contains("access-control-"));
    }

    #[test]
    fn bodies_are_capped_and_timed() {
        let (server, _release) = serve(TEST);
        let ok = ask(
            &server,
            "POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        );
        assert!(ok.ends_with("\r\n\r\n5"), "{ok}");
        let chunked = ask(
            &server,
            "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
             5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nTrailer: x\r\n\r\n",
        );
        assert!(chunked.ends_with("\r\n\r\n8"), "{chunked}");
        // Known too large from its head: refused before a byte of it is read.
        let t = Instant::now();
        let big = ask(
            &server,
            "POST /echo HTTP/1.1\r\nContent-Length: 400000000\r\n\r\n",
        );
        assert_eq!(status(&big), 413, "{big}");
        assert!(t.elapsed() < TEST.body_timeout, "answered at once");
        // Chunked: cut as soon as the chunks pass the cap, while the client keeps sending.
        let mut s = connect(&server);
        s.write_all(b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
            .unwrap();
        let mut w = s.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let chunk = format!("100\r\n{}\r\n", "x".repeat(256));
            let mut sent = 0usize;
            while sent < 400 << 20 {
                if w.write_all(chunk.as_bytes()).is_err() {
                    return sent;
                }
                sent += 256;
            }
            sent
        });
        let got = answer(s);
        assert_eq!(status(&got), 413, "{got}");
        let sent = sender.join().unwrap();
        assert!(sent < 64 << 20, "the server took {sent} bytes");
        // A body that stops arriving: idle.
        let mut s = connect(&server);
        s.write_all(b"POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc")
            .unwrap();
        let t = Instant::now();
        let got = answer(s);
        assert_eq!(status(&got), 408, "{got}");
        assert!(t.elapsed() >= TEST.idle_timeout);
        // A body that trickles: the body's deadline.
        let mut s = connect(&server);
        s.write_all(b"POST /echo HTTP/1.1\r\nContent-Length: 1000\r\n\r\n")
            .unwrap();
        let mut w = s.try_clone().unwrap();
        let t = Instant::now();
        let trickle = std::thread::spawn(move || {
            for _ in 0..100 {
                if w.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let got = answer(s);
        assert_eq!(status(&got), 408, "{got}");
        let waited = t.elapsed();
        assert!(waited >= TEST.body_timeout, "{waited:?}");
        assert!(
            waited < TEST.body_timeout + Duration::from_secs(2),
            "{waited:?}"
        );
        trickle.join().unwrap();
        // Expect: 100-continue is answered before the body is sent.
        let mut s = connect(&server);
        s.write_all(b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
            .unwrap();
        let mut first = [0u8; 25];
        s.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n");
        s.write_all(b"hi").unwrap();
        assert!(answer(s).ends_with("\r\n\r\n2"));
    }

    #[test]
    fn waiting_connections_and_requests_are_bounded() {
        let limits = Limits {
            idle_timeout: Duration::from_secs(5),
            header_timeout: Duration::from_secs(5),
            ..TEST
        };
        let (server, release) = serve(limits);
        // Six silent connections where four may wait: the two oldest are closed at once,
        // long before they would be for their silence.
        let silent: Vec<TcpStream> = (0..6)
            .map(|_| {
                let s = connect(&server);
                // Admitted in this order.
                std::thread::sleep(Duration::from_millis(30));
                s
            })
            .collect();
        let t = Instant::now();
        for s in &silent[..2] {
            assert_eq!(answer(s.try_clone().unwrap()), "");
        }
        assert!(
            t.elapsed() < limits.idle_timeout,
            "closed for room, not for silence"
        );
        for s in &silent[2..] {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let e = (&*s).read(&mut [0u8; 1]).expect_err("still waiting");
            assert!(matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ));
        }
        drop(silent);
        // Two workers and a queue of two: two requests held, two waiting, the fifth is
        // answered 503 at once.
        let held: Vec<TcpStream> = (0..4)
            .map(|_| {
                let mut s = connect(&server);
                s.write_all(b"GET /hold HTTP/1.1\r\n\r\n").unwrap();
                // Taken by the listening thread before the next one comes.
                std::thread::sleep(Duration::from_millis(50));
                s
            })
            .collect();
        let busy = ask(&server, "GET / HTTP/1.1\r\n\r\n");
        assert_eq!(status(&busy), 503, "{busy}");
        for _ in 0..4 {
            release.send(()).unwrap();
        }
        for s in held {
            assert!(answer(s).ends_with("held"));
        }
        let fine = ask(&server, "GET / HTTP/1.1\r\n\r\n");
        assert_eq!(status(&fine), 200, "{fine}");
        server.stop();
        assert!(
            TcpStream::connect(server.addr()).is_err(),
            "no longer listening"
        );
    }

    fn head(text: &str) -> Result<Request, Refusal> {
        parse_head(text.as_bytes())
    }

    #[test]
    fn heads_parse_and_ambiguous_framing_is_refused() {
        let r = head("GET /api/x?queue=a%20b&id=3 HTTP/1.1\r\nHost: localhost\r\nX-A: 1").unwrap();
        assert_eq!(r.path(), "/api/x");
        assert_eq!(r.query("queue").as_deref(), Some("a b"));
        assert_eq!(r.query("id").as_deref(), Some("3"));
        assert_eq!(r.header("host"), Some("localhost"));
        assert_eq!(r.framing, Framing::None);
        let r = head("POST / HTTP/1.1\r\nContent-Length: 12").unwrap();
        assert_eq!(r.framing, Framing::Length(12));
        let r = head("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked").unwrap();
        assert_eq!(r.framing, Framing::Chunked);
        for (bad, status) in [
            (
                "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked",
                400,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1",
                400,
            ),
            ("POST / HTTP/1.1\r\nContent-Length: -1", 400),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: gzip", 501),
            ("GET http://evil.example/ HTTP/1.1", 400),
            ("GET / HTTP/2.0", 505),
            ("GET / HTTP/1.1\r\nHost: a\r\n folded", 400),
            ("get / HTTP/1.1", 400),
            ("GET /", 400),
        ] {
            assert_eq!(head(bad).unwrap_err().0, status, "{bad:?}");
        }
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%41%zz"), "A%zz");
    }
}
