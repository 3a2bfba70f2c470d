//! A Jepsen-style checker over per-process event logs.
//!
//! Every worker process (`pbx-jepsen`) appends one line per event to a log file of its own,
//! written with one `write(2)` each and never buffered across events, so a SIGKILL loses at most
//! the line in progress (which [`read_log`] drops: it has no newline). A line is
//! `<CLOCK_MONOTONIC ns> <event>`; that clock is shared by the processes of one machine, so
//! events of different processes can be ordered. Calls are logged before they start (`TRY`,
//! `COMPLETING`, ...) and after they returned (`SENT`, `COMPLETE`, ...): an event "before"
//! without its "after" is an outcome the kill left unknown.
//!
//! [`check`] reads the histories together with the store's final contents and classifies every
//! message. A body is the client's token (optionally followed by `|` and padding), which ties
//! a stored message back to the `TRY` that produced it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// What a settle or a commit was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Complete,
    Abandon,
    DeadLetter,
    /// A transaction's commit: completes the received message and sends the follow-up.
    Commit,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Complete => "complete",
            Op::Abandon => "abandon",
            Op::DeadLetter => "deadletter",
            Op::Commit => "commit",
        }
    }

    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "complete" => Op::Complete,
            "abandon" => Op::Abandon,
            "deadletter" => Op::DeadLetter,
            "commit" => Op::Commit,
            _ => return None,
        })
    }

    /// Whether a success of this settle removes the message from the store.
    fn removes(self) -> bool {
        matches!(self, Op::Complete | Op::Commit)
    }
}

/// How the tokens of a `TRY` are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryKind {
    /// One message, one send.
    One,
    /// One message with its token as `message_key` (a retry after a crash must not duplicate).
    Key,
    /// Several messages in one `send_batch` (all or none).
    Batch,
    /// A batch large enough to bypass the write-ahead log (all or none).
    Big,
}

/// One event of a worker's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// About to open the store.
    Open,
    /// The store opened.
    Opened,
    /// About to send these tokens.
    Try { kind: TryKind, tokens: Vec<String> },
    /// The sends of these tokens returned these ids.
    Sent { acks: Vec<(String, u64)> },
    /// A send failed with an error of this kind: its outcome is unknown to the checker.
    SendFail { kind: String, tokens: Vec<String> },
    /// A receive returned message `id` with delivery count `dc` (`tx`: inside a transaction).
    Recv {
        id: u64,
        dc: u32,
        token: String,
        tx: bool,
    },
    /// A transaction that received `id` (delivery `dc`) is about to send `token` with it.
    TryFollow { id: u64, dc: u32, token: String },
    /// About to settle delivery `dc` of `id`; a commit also names its follow-up (token, id).
    Settling {
        op: Op,
        id: u64,
        dc: u32,
        follow: Option<(String, u64)>,
    },
    /// The settle returned Ok.
    Settled {
        op: Op,
        id: u64,
        dc: u32,
        follow: Option<(String, u64)>,
    },
    /// The settle failed with `LockLost`.
    LockLost { op: Op, id: u64, dc: u32 },
    /// The settle failed otherwise.
    Failed {
        op: Op,
        id: u64,
        dc: u32,
        kind: String,
    },
    /// The transaction that received `id` was aborted (its abort returned).
    TxAbort { id: u64, dc: u32 },
}

fn join_acks(acks: &[(String, u64)]) -> String {
    acks.iter()
        .map(|(t, id)| format!("{t}={id}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn follow_word(follow: &Option<(String, u64)>) -> String {
    follow
        .as_ref()
        .map_or_else(|| "-".to_owned(), |(t, id)| format!("{t}={id}"))
}

impl Event {
    /// The event as written in a log (without time and newline).
    pub fn line(&self) -> String {
        match self {
            Event::Open => "OPEN".into(),
            Event::Opened => "OPENED".into(),
            Event::Try { kind, tokens } => {
                let k = match kind {
                    TryKind::One => "one",
                    TryKind::Key => "key",
                    TryKind::Batch => "batch",
                    TryKind::Big => "big",
                };
                format!("TRY {k} {}", tokens.join(","))
            }
            Event::Sent { acks } => format!("SENT {}", join_acks(acks)),
            Event::SendFail { kind, tokens } => format!("SENDFAIL {kind} {}", tokens.join(",")),
            Event::Recv { id, dc, token, tx } => {
                format!("{} {id} {dc} {token}", if *tx { "TXRECV" } else { "RECV" })
            }
            Event::TryFollow { id, dc, token } => format!("TRYFOL {id} {dc} {token}"),
            Event::Settling { op, id, dc, follow } => {
                format!("SETTLING {} {id} {dc} {}", op.name(), follow_word(follow))
            }
            Event::Settled { op, id, dc, follow } => {
                format!("SETTLED {} {id} {dc} {}", op.name(), follow_word(follow))
            }
            Event::LockLost { op, id, dc } => format!("LOCKLOST {} {id} {dc}", op.name()),
            Event::Failed { op, id, dc, kind } => format!("FAILED {} {id} {dc} {kind}", op.name()),
            Event::TxAbort { id, dc } => format!("TXABORT {id} {dc}"),
        }
    }

    /// Parses what [`Event::line`] wrote.
    pub fn parse(s: &str) -> Option<Event> {
        let w: Vec<&str> = s.split_whitespace().collect();
        let num = |i: usize| -> Option<u64> { w.get(i)?.parse().ok() };
        let dc = |i: usize| -> Option<u32> { w.get(i)?.parse().ok() };
        let list = |i: usize| -> Option<Vec<String>> {
            Some(w.get(i)?.split(',').map(str::to_owned).collect())
        };
        let acks = |i: usize| -> Option<Vec<(String, u64)>> {
            w.get(i)?
                .split(',')
                .map(|p| {
                    let (t, id) = p.split_once('=')?;
                    Some((t.to_owned(), id.parse().ok()?))
                })
                .collect()
        };
        let follow = |i: usize| -> Option<Option<(String, u64)>> {
            match *w.get(i)? {
                "-" => Some(None),
                _ => Some(Some(acks(i)?.pop()?)),
            }
        };
        Some(match *w.first()? {
            "OPEN" => Event::Open,
            "OPENED" => Event::Opened,
            "TRY" => Event::Try {
                kind: match *w.get(1)? {
                    "one" => TryKind::One,
                    "key" => TryKind::Key,
                    "batch" => TryKind::Batch,
                    "big" => TryKind::Big,
                    _ => return None,
                },
                tokens: list(2)?,
            },
            "SENT" => Event::Sent { acks: acks(1)? },
            "SENDFAIL" => Event::SendFail {
                kind: (*w.get(1)?).to_owned(),
                tokens: list(2)?,
            },
            "RECV" | "TXRECV" => Event::Recv {
                id: num(1)?,
                dc: dc(2)?,
                token: (*w.get(3)?).to_owned(),
                tx: w[0] == "TXRECV",
            },
            "TRYFOL" => Event::TryFollow {
                id: num(1)?,
                dc: dc(2)?,
                token: (*w.get(3)?).to_owned(),
            },
            "SETTLING" => Event::Settling {
                op: Op::parse(w.get(1)?)?,
                id: num(2)?,
                dc: dc(3)?,
                follow: follow(4)?,
            },
            "SETTLED" => Event::Settled {
                op: Op::parse(w.get(1)?)?,
                id: num(2)?,
                dc: dc(3)?,
                follow: follow(4)?,
            },
            "LOCKLOST" => Event::LockLost {
                op: Op::parse(w.get(1)?)?,
                id: num(2)?,
                dc: dc(3)?,
            },
            "FAILED" => Event::Failed {
                op: Op::parse(w.get(1)?)?,
                id: num(2)?,
                dc: dc(3)?,
                kind: (*w.get(4)?).to_owned(),
            },
            "TXABORT" => Event::TxAbort {
                id: num(1)?,
                dc: dc(2)?,
            },
            _ => return None,
        })
    }
}

/// The clock every process of the machine shares (ns): CLOCK_MONOTONIC on Unix, the
/// performance counter on Windows.
pub fn now_ns() -> u64 {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
    #[cfg(windows)]
    {
        use windows_sys::Win32::System::Performance::{
            QueryPerformanceCounter, QueryPerformanceFrequency,
        };
        let (mut count, mut freq) = (0i64, 0i64);
        // SAFETY: valid out-pointers; both calls always succeed since Windows XP.
        unsafe {
            QueryPerformanceCounter(&mut count);
            QueryPerformanceFrequency(&mut freq);
        }
        (count as u128 * 1_000_000_000 / freq.max(1) as u128) as u64
    }
}

/// Appends events to a log file, one `write(2)` per line, and echoes each line to stdout so a
/// parent can wait on it. The file is the record; stdout only wakes the parent.
pub struct Logger {
    file: File,
    echo: bool,
    /// Windows: appends of several threads are not atomic under Wine (a line can land over
    /// another), so the threads take turns. Unix's `O_APPEND` needs no turns.
    #[cfg(windows)]
    turn: std::sync::Mutex<()>,
}

impl Logger {
    pub fn create(path: &Path, echo: bool) -> std::io::Result<Logger> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Logger {
            file,
            echo,
            #[cfg(windows)]
            turn: std::sync::Mutex::new(()),
        })
    }

    /// Writes the event; shared by threads (`O_APPEND` keeps each line whole).
    pub fn log(&self, event: &Event) {
        #[cfg(windows)]
        let _turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        let line = format!("{} {}\n", now_ns(), event.line());
        // `&File` writes straight through: nothing of this line waits in a buffer.
        (&self.file)
            .write_all(line.as_bytes())
            .expect("write the event log");
        if self.echo {
            // One write of the whole line, unbuffered; a closed pipe (the parent killed us or
            // stopped listening) only returns an error, ignored: the file is the record.
            #[cfg(unix)]
            // SAFETY: writes a valid buffer to fd 1.
            let _ = unsafe { libc::write(1, line.as_ptr().cast(), line.len()) };
            #[cfg(windows)]
            let _ = std::io::stdout().lock().write_all(line.as_bytes());
        }
    }
}

/// One logged event and when it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub t: u64,
    pub event: Event,
}

/// Parses one log line (`<ns> <event>`).
pub fn parse_record(line: &str) -> Option<Record> {
    let (t, rest) = line.split_once(' ')?;
    Some(Record {
        t: t.parse().ok()?,
        event: Event::parse(rest)?,
    })
}

/// Reads a log; a last line without its newline (cut by a kill) is dropped, and a missing log
/// is empty (its process was killed before it created it). Any other line that does not parse
/// is a bug of the worker and fails loudly.
pub fn read_log(path: &Path) -> Vec<Record> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("read {}: {e}", path.display()),
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.split('\n').collect();
    lines.pop(); // "" after a final newline, or the line a kill cut short
    lines
        .into_iter()
        .map(|l| {
            parse_record(l).unwrap_or_else(|| panic!("{}: bad event line {l:?}", path.display()))
        })
        .collect()
}

/// The client token in a body: everything before the first `|`.
pub fn token_of(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    s.split('|').next().unwrap_or_default().to_owned()
}

/// A message found in the store at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub id: u64,
    pub token: String,
    pub dc: u32,
    pub dead_lettered: bool,
}

/// The checker's verdict.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub processes: usize,
    pub events: usize,
    /// Distinct message ids known (acknowledged, received or found).
    pub messages: usize,
    /// Tokens whose send was acknowledged.
    pub sent: usize,
    /// Ids whose completion (or consuming commit) returned Ok.
    pub completed: usize,
    /// Tokens sent without acknowledgement but found committed (allowed).
    pub recovered: usize,
    /// Settles refused with `LockLost` (allowed: the lock had gone).
    pub lock_lost: usize,
    /// Messages found in the store at the end (dead-letter queue included).
    pub remaining: usize,
    // Violations.
    /// Known to exist, now neither in the store nor (possibly) completed.
    pub lost: usize,
    /// Found or received, but no process ever tried to send its token.
    pub unexpected: usize,
    /// Two successful completions of one id.
    pub duplicated: usize,
    /// Received (or found at the end) after a completion returned Ok.
    pub after_complete: usize,
    /// A delivery count that did not grow from one delivery to the next.
    pub dc_not_increasing: usize,
    /// A settle that returned Ok although a later delivery had taken the message.
    pub stale_settle: usize,
    /// A transaction's follow-up committed without its consumed message going, or the reverse.
    pub follow_up: usize,
    /// One token stored as two messages (dedup or a retry failed).
    pub dup_send: usize,
    /// Part of a batch committed, part not.
    pub partial_batch: usize,
    /// Calls that failed with an error no scenario expects.
    pub errors: usize,
    /// One line per violation (the first few hundred).
    pub details: Vec<String>,
}

impl Report {
    pub fn violations(&self) -> usize {
        self.lost
            + self.unexpected
            + self.duplicated
            + self.after_complete
            + self.dc_not_increasing
            + self.stale_settle
            + self.follow_up
            + self.dup_send
            + self.partial_batch
            + self.errors
    }

    /// One line for the scenario's summary.
    pub fn summary(&self) -> String {
        format!(
            "{} processes, {} events, {} messages, {} sent, {} completed, {} recovered, {} lock \
             lost, {} remaining; violations: lost {}, unexpected {}, duplicated {}, \
             after-complete {}, dc-not-increasing {}, stale-settle {}, follow-up {}, dup-send \
             {}, partial-batch {}, errors {}",
            self.processes,
            self.events,
            self.messages,
            self.sent,
            self.completed,
            self.recovered,
            self.lock_lost,
            self.remaining,
            self.lost,
            self.unexpected,
            self.duplicated,
            self.after_complete,
            self.dc_not_increasing,
            self.stale_settle,
            self.follow_up,
            self.dup_send,
            self.partial_batch,
            self.errors
        )
    }

    fn note(&mut self, what: String) {
        if self.details.len() < 300 {
            self.details.push(what);
        }
    }
}

/// A settle attempt: its delivery and whether (and when) it returned Ok.
#[derive(Debug)]
struct Attempt {
    op: Op,
    dc: u32,
    follow: Option<(String, u64)>,
    started_at: u64,
    ok_at: Option<u64>,
    /// A result (Ok or an error) was logged; without one the outcome is unknown.
    answered: bool,
    proc: usize,
}

/// Ties `id` to `token`; an id seen with two tokens is a message whose body changed.
fn bind(r: &mut Report, id: u64, token: &str, id_token: &mut BTreeMap<u64, String>) {
    if let Some(old) = id_token.insert(id, token.to_owned())
        && old != token
    {
        r.unexpected += 1;
        r.note(format!("message {id} seen with tokens {old} and {token}"));
    }
}

/// Checks the histories of every process (each a log, in its own order) against what the store
/// holds at the end. `expected_errors` lists error kinds (as logged) that a scenario allows.
pub fn check(logs: &[Vec<Record>], found: &[Found], expected_errors: &[&str]) -> Report {
    let mut r = Report {
        processes: logs.len(),
        events: logs.iter().map(Vec::len).sum(),
        remaining: found.len(),
        ..Report::default()
    };
    // token → batch (the tokens of its TRY) for every token ever tried.
    let mut tried: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut batches: Vec<Vec<String>> = Vec::new();
    let mut acked: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    // id → token, from every place an id is seen with its body.
    let mut id_token: BTreeMap<u64, String> = BTreeMap::new();
    let mut recvs: BTreeMap<u64, Vec<(u64, u32, usize)>> = BTreeMap::new();
    let mut attempts: BTreeMap<u64, Vec<Attempt>> = BTreeMap::new();
    // (consumed id, its delivery, follow-up token), for every follow-up a transaction tried.
    let mut follows: Vec<(u64, u32, String, usize)> = Vec::new();
    let found_ids: BTreeMap<u64, &Found> = found.iter().map(|f| (f.id, f)).collect();

    for (p, log) in logs.iter().enumerate() {
        for rec in log {
            match &rec.event {
                Event::Open | Event::Opened => {}
                Event::Try { kind, tokens } => {
                    for t in tokens {
                        tried.insert(t.clone(), tokens.clone());
                    }
                    if matches!(kind, TryKind::Batch | TryKind::Big) {
                        batches.push(tokens.clone());
                    }
                }
                Event::Sent { acks } => {
                    for (t, id) in acks {
                        acked.entry(t.clone()).or_default().insert(*id);
                        bind(&mut r, *id, t, &mut id_token);
                    }
                }
                Event::SendFail { kind, tokens } => {
                    if !expected_errors.contains(&kind.as_str()) {
                        r.errors += 1;
                        r.note(format!("process {p}: send of {tokens:?} failed: {kind}"));
                    }
                }
                Event::Recv { id, dc, token, .. } => {
                    recvs.entry(*id).or_default().push((rec.t, *dc, p));
                    bind(&mut r, *id, token, &mut id_token);
                }
                Event::TryFollow { id, dc, token } => {
                    tried.insert(token.clone(), vec![token.clone()]);
                    follows.push((*id, *dc, token.clone(), p));
                }
                Event::Settling { op, id, dc, follow } => {
                    attempts.entry(*id).or_default().push(Attempt {
                        op: *op,
                        dc: *dc,
                        follow: follow.clone(),
                        started_at: rec.t,
                        ok_at: None,
                        answered: false,
                        proc: p,
                    });
                }
                Event::Settled { op, id, dc, follow } => {
                    let a = attempts
                        .get_mut(id)
                        .and_then(|v| {
                            v.iter_mut()
                                .rev()
                                .find(|a| a.proc == p && a.dc == *dc && a.op == *op && !a.answered)
                        })
                        .unwrap_or_else(|| panic!("process {p}: settled {id} without settling"));
                    a.answered = true;
                    a.ok_at = Some(rec.t);
                    if let Some((t, fid)) = follow {
                        acked.entry(t.clone()).or_default().insert(*fid);
                        bind(&mut r, *fid, t, &mut id_token);
                    }
                }
                Event::LockLost { op, id, dc } | Event::Failed { op, id, dc, .. } => {
                    if let Event::Failed { kind, .. } = &rec.event {
                        if !expected_errors.contains(&kind.as_str()) {
                            r.errors += 1;
                            r.note(format!("process {p}: {} of {id} failed: {kind}", op.name()));
                        }
                    } else {
                        r.lock_lost += 1;
                    }
                    if let Some(a) = attempts.get_mut(id).and_then(|v| {
                        v.iter_mut()
                            .rev()
                            .find(|a| a.proc == p && a.dc == *dc && a.op == *op && !a.answered)
                    }) {
                        a.answered = true;
                    }
                }
                Event::TxAbort { .. } => {}
            }
        }
    }
    for f in found {
        bind(&mut r, f.id, &f.token, &mut id_token);
    }

    // Tokens: which committed (an id is known for them), whether any was never tried, sent
    // twice, or committed without acknowledgement.
    let mut token_ids: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for (id, t) in &id_token {
        token_ids.entry(t.as_str()).or_default().insert(*id);
    }
    for (t, ids) in &token_ids {
        if !tried.contains_key(*t) {
            r.unexpected += ids.len();
            r.note(format!("messages {ids:?} carry token {t}, never tried"));
        }
        if ids.len() > 1 {
            r.dup_send += 1;
            r.note(format!("token {t} stored as {ids:?}"));
        }
    }
    r.sent = acked.len();
    r.recovered = token_ids
        .keys()
        .filter(|t| tried.contains_key(**t) && !acked.contains_key(**t))
        .count();
    for b in &batches {
        let committed = b
            .iter()
            .filter(|t| token_ids.contains_key(t.as_str()))
            .count();
        if committed != 0 && committed != b.len() {
            r.partial_batch += 1;
            r.note(format!("batch {b:?}: {committed} of {} committed", b.len()));
        }
    }

    // Messages.
    r.messages = id_token.len();
    for id in id_token.keys() {
        let recv = recvs.get(id).map(Vec::as_slice).unwrap_or_default();
        let tries = attempts.get(id).map(Vec::as_slice).unwrap_or_default();
        let oks: Vec<&Attempt> = tries.iter().filter(|a| a.ok_at.is_some()).collect();
        let removed: Vec<&&Attempt> = oks.iter().filter(|a| a.op.removes()).collect();
        if !removed.is_empty() {
            r.completed += 1;
        }
        if removed.len() > 1 {
            r.duplicated += 1;
            r.note(format!("message {id} completed {} times", removed.len()));
        }
        let present = found_ids.get(id);
        if present.is_none()
            && removed.is_empty()
            && !tries.iter().any(|a| a.op.removes() && !a.answered)
        {
            r.lost += 1;
            r.note(format!(
                "message {id} ({}) lost: not in the store, never completed",
                id_token[id]
            ));
        }
        if let Some(c) = removed.first() {
            let at = c.ok_at.unwrap_or_default();
            let late = recv.iter().filter(|(t, ..)| *t > at).count();
            if late > 0 || present.is_some() {
                r.after_complete += 1;
                r.note(format!(
                    "message {id}: {late} receives after its completion, present at end: {}",
                    present.is_some()
                ));
            }
        }
        let mut by_time = recv.to_vec();
        by_time.sort_unstable();
        let bad_order = by_time.windows(2).any(|w| w[1].1 <= w[0].1);
        let last_dc = by_time.last().map(|x| x.1);
        let final_behind = matches!((present, last_dc), (Some(f), Some(dc)) if f.dc < dc);
        if bad_order || final_behind {
            r.dc_not_increasing += 1;
            let dcs: Vec<u32> = by_time.iter().map(|x| x.1).collect();
            r.note(format!(
                "message {id}: delivery counts {dcs:?}, at end {:?}",
                present.map(|f| f.dc)
            ));
        }
        for a in &oks {
            // Once a completion commits nobody can receive the message, so a later delivery
            // logged before its answer means it completed a lock it had lost. An abandon gives
            // the message back before its caller logs the answer: only a later delivery seen
            // before the abandon began proves the lock was gone.
            let before = if a.op.removes() {
                a.ok_at.unwrap_or_default()
            } else {
                a.started_at
            };
            if recv.iter().any(|(t, dc, _)| *dc > a.dc && *t < before) {
                r.stale_settle += 1;
                r.note(format!(
                    "message {id}: {} of delivery {} returned Ok after a later delivery",
                    a.op.name(),
                    a.dc
                ));
            }
        }
    }

    // A transaction's follow-up exists iff the message it consumed is gone for it.
    for (id, dc, token, p) in &follows {
        let committed = token_ids.contains_key(token.as_str());
        let gone = !found_ids.contains_key(id)
            && !recvs
                .get(id)
                .is_some_and(|v| v.iter().any(|(_, d, _)| d > dc));
        let attempted = attempts.get(id).is_some_and(|v| {
            v.iter().any(|a| {
                a.proc == *p && a.dc == *dc && a.follow.as_ref().is_some_and(|f| &f.0 == token)
            })
        });
        if committed != gone || (committed && !attempted) {
            r.follow_up += 1;
            r.note(format!(
                "follow-up {token} of message {id} (delivery {dc}): committed {committed}, \
                 consumed gone {gone}, commit attempted {attempted}"
            ));
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t: u64, line: &str) -> Record {
        let event = Event::parse(line).unwrap_or_else(|| panic!("bad line {line}"));
        assert_eq!(event.line(), line, "round trip");
        Record { t, event }
    }

    fn log(lines: &[&str]) -> Vec<Record> {
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| rec(i as u64 * 10, l))
            .collect()
    }

    fn found(id: u64, token: &str, dc: u32) -> Found {
        Found {
            id,
            token: token.into(),
            dc,
            dead_lettered: false,
        }
    }

    /// A producer that sent a0 (id 1) and a1 (id 2), and a consumer that completed a0.
    fn clean() -> Vec<Vec<Record>> {
        vec![
            log(&[
                "OPEN",
                "OPENED",
                "TRY one a0",
                "SENT a0=1",
                "TRY one a1",
                "SENT a1=2",
            ]),
            log(&[
                "OPEN",
                "OPENED",
                "RECV 1 1 a0",
                "SETTLING complete 1 1 -",
                "SETTLED complete 1 1 -",
            ]),
        ]
    }

    fn only(r: &Report, class: usize, name: &str) {
        assert_eq!(class, 1, "{name}: {}", r.summary());
        assert_eq!(
            r.violations(),
            1,
            "{name} only: {}\n{:?}",
            r.summary(),
            r.details
        );
    }

    #[test]
    fn a_clean_history_has_no_violation() {
        let r = check(&clean(), &[found(2, "a1", 0)], &[]);
        assert_eq!(r.violations(), 0, "{:?}", r.details);
        assert_eq!((r.messages, r.sent, r.completed), (2, 2, 1));
    }

    #[test]
    fn a_torn_last_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        std::fs::write(&path, "5 TRY one a0\n6 SENT a0=1\n7 RECV 1 1").unwrap();
        assert_eq!(read_log(&path).len(), 2);
    }

    #[test]
    fn lost() {
        let r = check(&clean(), &[], &[]);
        only(&r, r.lost, "lost");
        // A completion whose outcome is unknown may have taken it.
        let mut logs = clean();
        logs[1].extend(log(&["RECV 2 1 a1", "SETTLING complete 2 1 -"]));
        assert_eq!(check(&logs, &[], &[]).violations(), 0);
        // One that failed did not.
        logs[1].push(rec(1000, "LOCKLOST complete 2 1"));
        let r = check(&logs, &[], &[]);
        only(&r, r.lost, "lost after a failed completion");
    }

    #[test]
    fn unexpected() {
        let r = check(&clean(), &[found(2, "a1", 0), found(9, "zz", 0)], &[]);
        only(&r, r.unexpected, "unexpected");
    }

    #[test]
    fn duplicated() {
        let mut logs = clean();
        logs.push(log(&["SETTLING complete 1 1 -", "SETTLED complete 1 1 -"]));
        let r = check(&logs, &[found(2, "a1", 0)], &[]);
        assert_eq!(r.duplicated, 1, "{}", r.summary());
    }

    #[test]
    fn received_after_completion() {
        let mut logs = clean();
        logs.push(vec![rec(1000, "RECV 1 2 a0")]);
        let r = check(&logs, &[found(2, "a1", 0)], &[]);
        only(&r, r.after_complete, "after complete");
        // Found in the store after its completion returned.
        let r = check(&clean(), &[found(1, "a0", 1), found(2, "a1", 0)], &[]);
        only(&r, r.after_complete, "present after complete");
    }

    #[test]
    fn delivery_count_not_increasing() {
        let mut logs = clean();
        logs.push(vec![rec(1, "RECV 2 3 a1"), rec(2, "RECV 2 3 a1")]);
        let r = check(&logs, &[found(2, "a1", 3)], &[]);
        only(&r, r.dc_not_increasing, "equal counts");
        // The store's count went back.
        logs.pop();
        logs.push(vec![rec(1, "RECV 2 3 a1")]);
        let r = check(&logs, &[found(2, "a1", 2)], &[]);
        only(&r, r.dc_not_increasing, "count went back");
    }

    #[test]
    fn stale_settle() {
        // Delivery 1 completes Ok after delivery 2 was handed to someone else.
        let logs = vec![
            vec![rec(0, "TRY one a0"), rec(1, "SENT a0=1")],
            vec![
                rec(2, "RECV 1 1 a0"),
                rec(50, "SETTLING complete 1 1 -"),
                rec(60, "SETTLED complete 1 1 -"),
            ],
            vec![
                rec(30, "RECV 1 2 a0"),
                rec(40, "SETTLING abandon 1 2 -"),
                rec(45, "LOCKLOST abandon 1 2"),
            ],
        ];
        let r = check(&logs, &[], &[]);
        only(&r, r.stale_settle, "stale settle");
        assert_eq!(r.lock_lost, 1);
        // The next delivery may be logged before an abandon's answer is, not before it began.
        let abandon = |t: u64| {
            vec![
                vec![rec(0, "TRY one a0"), rec(1, "SENT a0=1")],
                vec![
                    rec(2, "RECV 1 1 a0"),
                    rec(20, "SETTLING abandon 1 1 -"),
                    rec(60, "SETTLED abandon 1 1 -"),
                ],
                vec![rec(t, "RECV 1 2 a0")],
            ]
        };
        let r = check(&abandon(30), &[found(1, "a0", 2)], &[]);
        assert_eq!(r.violations(), 0, "{:?}", r.details);
        let r = check(&abandon(10), &[found(1, "a0", 2)], &[]);
        only(&r, r.stale_settle, "abandon after a later delivery");
    }

    #[test]
    fn follow_up_without_its_consumption() {
        let tx = |committed: &str| {
            let mut l = vec!["TXRECV 2 1 a1", "TRYFOL 2 1 f0", "SETTLING commit 2 1 f0=3"];
            l.push(committed);
            log(&l)
        };
        // Committed: the follow-up exists and the consumed message is gone.
        let mut logs = clean();
        logs.push(tx("SETTLED commit 2 1 f0=3"));
        assert_eq!(check(&logs, &[found(3, "f0", 0)], &[]).violations(), 0);
        // The follow-up exists but the consumed message is still there.
        let mut logs = clean();
        logs.push(tx("FAILED commit 2 1 Io"));
        let r = check(&logs, &[found(2, "a1", 1), found(3, "f0", 0)], &["Io"]);
        only(&r, r.follow_up, "follow-up without consumption");
        // The consumed message is gone (the commit's outcome unknown) but no follow-up.
        let mut logs = clean();
        logs.push(log(&[
            "TXRECV 2 1 a1",
            "TRYFOL 2 1 f0",
            "SETTLING commit 2 1 f0=3",
        ]));
        let r = check(&logs, &[], &[]);
        only(&r, r.follow_up, "consumption without follow-up");
        // Recovered: the commit landed though its answer was cut off.
        let r = check(&logs, &[found(3, "f0", 0)], &[]);
        assert_eq!(r.violations(), 0, "{:?}", r.details);
        assert_eq!(r.recovered, 1);
    }

    #[test]
    fn one_token_stored_twice() {
        let logs = vec![log(&["TRY key k0"]), log(&["TRY key k0", "SENT k0=2"])];
        let r = check(&logs, &[found(1, "k0", 0), found(2, "k0", 0)], &[]);
        only(&r, r.dup_send, "dup send");
        assert_eq!(r.recovered, 0);
        // Deduplicated: the retry returned the first id.
        let logs = vec![log(&["TRY key k0"]), log(&["TRY key k0", "SENT k0=1"])];
        let r = check(&logs, &[found(1, "k0", 0)], &[]);
        assert_eq!(r.violations(), 0);
    }

    #[test]
    fn partial_batch_and_recovered() {
        let logs = vec![log(&["TRY batch b0,b1,b2"])];
        let r = check(&logs, &[found(1, "b0", 0), found(2, "b1", 0)], &[]);
        only(&r, r.partial_batch, "partial batch");
        let r = check(
            &logs,
            &[found(1, "b0", 0), found(2, "b1", 0), found(3, "b2", 0)],
            &[],
        );
        assert_eq!(r.violations(), 0);
        assert_eq!(r.recovered, 3);
        assert_eq!(check(&logs, &[], &[]).violations(), 0, "none committed");
    }

    #[test]
    fn unexpected_errors() {
        let logs = vec![log(&["TRY one a0", "SENDFAIL Io a0"])];
        let r = check(&logs, &[], &[]);
        only(&r, r.errors, "errors");
        assert_eq!(check(&logs, &[], &["Io"]).violations(), 0);
    }
}
