//! Once a second, every queue's counts and traffic: the rates and charts of the dashboard and
//! `/metrics` come from the difference of two samples.
//!
//! Two kinds of rate come out of it, and they mean different things. The counts are the
//! store file's own (`Queue::stats`), kept exact by every commit of every process, so their
//! change per second is the whole store's: sends minus everything that takes a message away
//! (completions, dead-letterings, expiries, purges), which cancel out when they balance. The
//! traffic (`Queue::traffic`) counts the sends and completions of this process only: the
//! file keeps no such totals, so no process can see another's. For a store held in
//! single-process mode by the serving application that is the whole store's traffic; for a
//! store several processes share, it is only what goes through the serving one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use postbox::{ErrorKind, JobInfo, QueueStats, QueueTraffic, SessionInfo, Store, StoreStats};

/// How often a sample is taken.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Samples kept: two minutes of history for the charts.
const KEPT: usize = 120;

/// One queue at one moment.
#[derive(Debug, Clone)]
pub struct QueueSample {
    pub name: String,
    pub stats: QueueStats,
    pub traffic: QueueTraffic,
    /// Age of the message a receive would take next (the oldest of the highest priority).
    pub head_age: Option<Duration>,
    /// Its session groups (empty unless the queue requires sessions).
    pub sessions: Vec<SessionInfo>,
}

/// Every queue at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub queues: Vec<QueueSample>,
    pub store: StoreStats,
    /// Size of the write-ahead log file now (0 without one).
    pub log_file_bytes: u64,
    /// Every job (batch) with its progress, in id order.
    pub jobs: Vec<JobInfo>,
}

/// Per-second rates of one queue between two samples.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rates {
    /// Sends by this process (its traffic).
    pub sends: f64,
    /// Completions by this process (its traffic).
    pub completions: f64,
    /// Change of the messages the queue holds (active, locked, scheduled, deferred), from the
    /// store's counts: every process's work, negative when the queue shrinks.
    pub net: f64,
    /// Change of the queue's dead letters, from the store's counts (every process).
    pub dead_lettered: f64,
}

/// The messages a queue holds, whatever their state (its dead letters aside).
pub fn held(s: &QueueStats) -> u64 {
    s.active + s.locked + s.scheduled + s.deferred
}

/// Reads every queue now.
pub fn take(store: &Store) -> postbox::Result<Sample> {
    let now = SystemTime::now();
    let mut queues = Vec::new();
    for name in store.queues()? {
        // A queue deleted between the listing and its read is simply gone.
        let q = match store.open_queue(&name) {
            Ok(q) => q,
            Err(e) if e.kind() == ErrorKind::QueueNotFound => continue,
            Err(e) => return Err(e),
        };
        let stats = match q.stats() {
            Ok(s) => s,
            Err(e) if e.kind() == ErrorKind::QueueNotFound => continue,
            Err(e) => return Err(e),
        };
        let head_age = if stats.active > 0 {
            q.peek()?
                .map(|m| now.duration_since(m.enqueued_at()).unwrap_or_default())
        } else {
            None
        };
        let sessions = match q.sessions() {
            Ok(s) => s,
            Err(e) if e.kind() == ErrorKind::QueueNotFound => continue,
            Err(e) => return Err(e),
        };
        queues.push(QueueSample {
            name,
            stats,
            traffic: q.traffic(),
            head_age,
            sessions,
        });
    }
    let mut log = store.path().as_os_str().to_owned();
    log.push("-log");
    Ok(Sample {
        at_ms: millis(now),
        queues,
        store: store.stats(),
        log_file_bytes: std::fs::metadata(&log).map_or(0, |m| m.len()),
        jobs: store.jobs()?,
    })
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Rates of queue `name` from `before` to `after` (zero when it is in only one of them: a
/// queue created or deleted meanwhile has no change to show).
pub fn rates(before: &Sample, after: &Sample, name: &str) -> Rates {
    let secs = (after.at_ms.saturating_sub(before.at_ms) as f64 / 1000.0).max(1e-3);
    fn find<'a>(s: &'a Sample, name: &str) -> Option<&'a QueueSample> {
        s.queues.iter().find(|q| q.name == name)
    }
    let change = |b: u64, a: u64| (a as f64 - b as f64) / secs;
    match (find(before, name), find(after, name)) {
        (Some(b), Some(a)) => Rates {
            // A reopened store counts from zero again: no negative rates.
            sends: a.traffic.sent.saturating_sub(b.traffic.sent) as f64 / secs,
            completions: a.traffic.completed.saturating_sub(b.traffic.completed) as f64 / secs,
            net: change(held(&b.stats), held(&a.stats)),
            dead_lettered: change(b.stats.dead_lettered, a.stats.dead_lettered),
        },
        _ => Rates::default(),
    }
}

/// The samples of the last two minutes, taken by a thread of their own.
pub struct Sampler {
    history: Mutex<VecDeque<Arc<Sample>>>,
    stop: AtomicBool,
}

impl Sampler {
    /// Starts sampling `store` every [`INTERVAL`] until [`Sampler::stop`].
    pub fn start(store: Store) -> (Arc<Sampler>, std::thread::JoinHandle<()>) {
        let sampler = Arc::new(Sampler {
            history: Mutex::new(VecDeque::with_capacity(KEPT)),
            stop: AtomicBool::new(false),
        });
        let s = sampler.clone();
        let thread = std::thread::Builder::new()
            .name("postbox-admin-sampler".into())
            .spawn(move || {
                while !s.stop.load(Ordering::SeqCst) {
                    match take(&store) {
                        Ok(sample) => s.push(Arc::new(sample)),
                        // A closed store ends the sampling; anything else is tried again.
                        Err(e) if e.kind() == ErrorKind::Closed => break,
                        Err(e) => tracing::warn!(error = %e, "admin sample failed"),
                    }
                    let until = std::time::Instant::now() + INTERVAL;
                    while !s.stop.load(Ordering::SeqCst) && std::time::Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            });
        match thread {
            Ok(t) => (sampler, t),
            // Without a thread there is no history; rates stay at zero.
            Err(e) => {
                tracing::warn!(error = %e, "admin sampler thread could not start");
                (sampler, std::thread::spawn(|| {}))
            }
        }
    }

    fn push(&self, sample: Arc<Sample>) {
        let mut h = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        if h.len() == KEPT {
            h.pop_front();
        }
        h.push_back(sample);
    }

    /// The samples kept, oldest first.
    pub fn history(&self) -> Vec<Arc<Sample>> {
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// The two most recent samples, older first, once two were taken: rates are taken
    /// between them, a whole interval apart (a fresh read and the last sample may be a few
    /// milliseconds apart, and one message over a few milliseconds is no rate).
    pub fn last_two(&self) -> Option<(Arc<Sample>, Arc<Sample>)> {
        let h = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        let n = h.len();
        (n >= 2).then(|| (h[n - 2].clone(), h[n - 1].clone()))
    }

    /// Asks the thread to stop (it ends within 50 ms).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
