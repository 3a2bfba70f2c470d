//! Counters of each link, shared between its task and whoever asks (`Bridge::stats`, the
//! status line, `/metrics`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

use crate::config::{Direction, LinkConfig};

/// What one link has done since its bridge started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkStats {
    /// Which way it carries messages.
    pub direction: Direction,
    /// The local queue.
    pub local: String,
    /// The broker queue (or `exchange/routing-key`).
    pub remote: String,
    /// Whether its connection and channel are up now.
    pub connected: bool,
    /// Messages carried: confirmed by the broker and completed locally (outgoing), or
    /// committed locally and acknowledged to the broker (incoming).
    pub forwarded: u64,
    /// Outgoing: held locally and not yet confirmed. Incoming: delivered and not yet
    /// acknowledged.
    pub in_flight: u64,
    /// Connections made after the first (each after a drop or refusal).
    pub reconnects: u64,
    /// Publishes sent again after a drop or a negative confirm (each may be a duplicate at
    /// the broker, with the same `message-id`).
    pub republished: u64,
    /// Negative confirms from the broker (outgoing).
    pub nacked: u64,
    /// Messages moved to the local dead-letter queue with the broker's reason (outgoing:
    /// returned as unroutable, or closing the channel `poison_after` times).
    pub dead_lettered: u64,
    /// Deliveries rejected to the broker's dead-letter policy because the local queue refused
    /// them for good (incoming).
    pub rejected: u64,
    /// Local operations retried after a transient failure (a full queue or disk, a lost lock).
    pub local_retries: u64,
    /// The last failure seen, if any.
    pub last_error: Option<String>,
}

/// A whole bridge's statistics, a link per entry in configuration order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BridgeStats {
    /// One per link.
    pub links: Vec<LinkStats>,
}

impl BridgeStats {
    /// Messages carried by every link together.
    pub fn forwarded(&self) -> u64 {
        self.links.iter().map(|l| l.forwarded).sum()
    }

    /// Whether every link is connected.
    pub fn connected(&self) -> bool {
        self.links.iter().all(|l| l.connected)
    }

    /// One line for a terminal: per link, its direction, counts and state.
    pub fn status_line(&self) -> String {
        let mut s = String::new();
        for l in &self.links {
            if !s.is_empty() {
                s.push_str(" | ");
            }
            let arrow = match l.direction {
                Direction::Outgoing => format!("{} -> {}", l.local, l.remote),
                Direction::Incoming => format!("{} -> {}", l.remote, l.local),
            };
            let _ = write!(
                s,
                "{arrow}: {} fwd, {} in flight, {}",
                l.forwarded,
                l.in_flight,
                if l.connected { "up" } else { "DOWN" }
            );
            if l.reconnects > 0 {
                let _ = write!(s, ", {} reconnects", l.reconnects);
            }
            if l.dead_lettered + l.rejected > 0 {
                let _ = write!(s, ", {} dead", l.dead_lettered + l.rejected);
            }
        }
        s
    }

    /// The counters in Prometheus' text format, `postbox_bridge_*` with labels `direction`,
    /// `local` and `remote`: what `postbox bridge --bind` adds to the dashboard's `/metrics`.
    pub fn prometheus(&self) -> String {
        type Get = fn(&LinkStats) -> u64;
        let rows: [(&str, &str, &str, Get); 9] = [
            (
                "forwarded_total",
                "counter",
                "Messages carried end to end",
                |l| l.forwarded,
            ),
            (
                "in_flight",
                "gauge",
                "Messages taken and not yet settled on both sides",
                |l| l.in_flight,
            ),
            (
                "connected",
                "gauge",
                "1 while the link's connection is up",
                |l| u64::from(l.connected),
            ),
            (
                "reconnects_total",
                "counter",
                "Connections after the first",
                |l| l.reconnects,
            ),
            (
                "republished_total",
                "counter",
                "Publishes sent again",
                |l| l.republished,
            ),
            (
                "nacked_total",
                "counter",
                "Negative publisher confirms",
                |l| l.nacked,
            ),
            (
                "dead_lettered_total",
                "counter",
                "Messages dead-lettered locally",
                |l| l.dead_lettered,
            ),
            (
                "rejected_total",
                "counter",
                "Deliveries rejected to the broker",
                |l| l.rejected,
            ),
            (
                "local_retries_total",
                "counter",
                "Local operations retried",
                |l| l.local_retries,
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, get) in rows {
            let _ = writeln!(out, "# HELP postbox_bridge_{name} {help}.");
            let _ = writeln!(out, "# TYPE postbox_bridge_{name} {kind}");
            for l in &self.links {
                let _ = writeln!(
                    out,
                    "postbox_bridge_{name}{{direction=\"{}\",local=\"{}\",remote=\"{}\"}} {}",
                    l.direction.as_str(),
                    escape(&l.local),
                    escape(&l.remote),
                    get(l)
                );
            }
        }
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The live counters behind a [`LinkStats`].
#[derive(Debug)]
pub(crate) struct Counters {
    direction: Direction,
    local: String,
    remote: String,
    pub connected: AtomicBool,
    pub forwarded: AtomicU64,
    pub in_flight: AtomicU64,
    pub reconnects: AtomicU64,
    pub republished: AtomicU64,
    pub nacked: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub rejected: AtomicU64,
    pub local_retries: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Counters {
    pub(crate) fn new(link: &LinkConfig) -> Counters {
        Counters {
            direction: link.direction,
            local: link.local.clone(),
            remote: link.remote_name(),
            connected: AtomicBool::new(false),
            forwarded: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            republished: AtomicU64::new(0),
            nacked: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            local_retries: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub(crate) fn set_error(&self, what: String) {
        tracing::warn!(local = %self.local, remote = %self.remote, "bridge: {what}");
        *self.last_error.lock() = Some(what);
    }

    pub(crate) fn snapshot(&self) -> LinkStats {
        LinkStats {
            direction: self.direction,
            local: self.local.clone(),
            remote: self.remote.clone(),
            connected: self.connected.load(Relaxed),
            forwarded: self.forwarded.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
            reconnects: self.reconnects.load(Relaxed),
            republished: self.republished.load(Relaxed),
            nacked: self.nacked.load(Relaxed),
            dead_lettered: self.dead_lettered.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            local_retries: self.local_retries.load(Relaxed),
            last_error: self.last_error.lock().clone(),
        }
    }
}
