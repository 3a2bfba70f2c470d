//! Commands that change queues: create, send, receive, purge, redrive, move.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use indicatif::{ProgressBar, ProgressStyle};
use postbox::{Message, Queue, Store};
use serde_json::json;

use super::SendProps;
use super::inspect::{show, to_json};
use super::record::{Record, count, parse_time};
use crate::fail::{Failure, Outcome};
use crate::io::stopping;

/// A progress bar on standard error when it is a terminal, hidden otherwise (scripts, tests).
pub fn progress(len: Option<u64>, what: &str) -> ProgressBar {
    if !crate::io::stderr_is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = match len {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {human_pos}/{human_len} ({per_sec}, {eta} left)",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {msg} {human_pos} ({per_sec})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    bar.set_message(what.to_owned());
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// Opens queue `name`, creating it only when asked: a typo should not make a queue.
/// `postbox create`: `store` (at `path`, which held a store already when `existed`) and the
/// queues `queues`, each made if missing; nothing that exists changes.
pub fn create(
    store: &Store,
    path: &Path,
    existed: bool,
    queues: &[String],
    as_json: bool,
) -> Outcome {
    let before: BTreeSet<String> = store.queues()?.into_iter().collect();
    let mut made = Vec::with_capacity(queues.len());
    for name in queues {
        store.queue(name)?;
        made.push((name.as_str(), !before.contains(name)));
    }
    if as_json {
        let queues: Vec<_> = made
            .iter()
            .map(|(name, created)| json!({ "name": name, "created": created }))
            .collect();
        say!(
            "{}",
            json!({ "store": path.display().to_string(), "created": !existed, "queues": queues })
        );
        return Ok(());
    }
    if existed {
        say!("{} is a store already: kept as it is", path.display());
    } else {
        say!("created store {}", path.display());
    }
    for (name, created) in made {
        if created {
            say!("created queue {name}");
        } else {
            say!("queue {name} exists already");
        }
    }
    Ok(())
}

pub fn target_queue(store: &Store, name: &str, create: bool) -> Outcome<Queue> {
    if create {
        Ok(store.queue(name)?)
    } else {
        store.open_queue(name).map_err(|e| match e.kind() {
            postbox::ErrorKind::QueueNotFound => {
                Failure::not_found(format!("queue {name:?} does not exist (--create makes it)"))
            }
            _ => e.into(),
        })
    }
}

fn build_message(body: Vec<u8>, p: &SendProps) -> Outcome<Message> {
    let mut m = Message::new(body);
    if let Some(v) = &p.label {
        m = m.label(v.clone());
    }
    if let Some(v) = &p.content_type {
        m = m.content_type(v.clone());
    }
    if let Some(v) = &p.correlation_id {
        m = m.correlation_id(v.clone());
    }
    if let Some(v) = &p.reply_to {
        m = m.reply_to(v.clone());
    }
    if let Some(v) = &p.message_key {
        m = m.message_key(v.clone());
    }
    if let Some(v) = &p.group {
        m = m.group(v.clone());
    }
    if let Some(v) = p.sequence {
        m = m.sequence(v);
    }
    if let Some(v) = p.priority {
        m = m.priority(v);
    }
    if let Some(v) = p.ttl {
        m = m.ttl(v);
    }
    if let Some(v) = &p.expires_at {
        m = m.expires_at(parse_time("--expires-at", v)?);
    }
    if let Some(v) = p.delay {
        m = m.delay(v);
    }
    if let Some(v) = &p.at {
        m = m.visible_at(parse_time("--at", v)?);
    }
    for kv in &p.properties {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(Failure::usage(format!(
                "--property {kv:?}: expected KEY=VALUE"
            )));
        };
        m = m.property(k, v);
    }
    Ok(m)
}

/// `postbox send`: one message with the properties given as flags.
pub fn send(
    store: &Store,
    queue: &str,
    body: Option<String>,
    file: Option<PathBuf>,
    create: bool,
    props: &SendProps,
    as_json: bool,
) -> Outcome {
    let q = target_queue(store, queue, create)?;
    let body = match (body, file) {
        (Some(b), _) => b.into_bytes(),
        (None, Some(path)) => std::fs::read(&path)
            .map_err(|e| Failure::not_found(format!("cannot read {}: {e}", path.display())))?,
        (None, None) => {
            if crate::io::stdin_is_terminal() {
                tell!("reading the body from standard input; end it with Ctrl-D");
            }
            let mut b = Vec::new();
            crate::io::stdin().read_to_end(&mut b)?;
            b
        }
    };
    let sent = q.send_checked(build_message(body, props)?)?;
    if as_json {
        say!(
            "{}",
            json!({ "queue": q.name(), "id": sent.id.get(), "duplicate": sent.duplicate })
        );
    } else if sent.duplicate {
        say!(
            "duplicate of message {} in {} (its key is in the dedup window): nothing sent",
            sent.id,
            q.name()
        );
    } else {
        say!("sent message {} to {}", sent.id, q.name());
    }
    Ok(())
}

/// What `receive` does with the message it took.
pub enum Settle {
    Complete,
    Abandon,
    DeadLetter(String, String),
}

/// `postbox receive`: locks the next message, shows it, then settles it as asked.
pub fn receive(q: &Queue, timeout: Duration, settle: Settle, as_json: bool) -> Outcome {
    // Wait in short slices so that Ctrl-C ends the wait.
    let deadline = Instant::now() + timeout;
    let msg = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if let Some(m) = q.receive(left.min(Duration::from_millis(200)))? {
            break m;
        }
        if stopping() {
            return Err(Failure::interrupted("waiting; nothing was received"));
        }
        if left.is_zero() {
            return Err(Failure::not_found(format!(
                "nothing to receive in {}",
                q.name()
            )));
        }
    };
    let record = Record::from_envelope(msg.envelope());
    let text = show(msg.envelope());
    let outcome = match settle {
        Settle::Complete => {
            msg.complete()?;
            "completed"
        }
        Settle::Abandon => {
            msg.abandon()?;
            "abandoned"
        }
        Settle::DeadLetter(reason, description) => {
            msg.dead_letter(&reason, &description)?;
            "dead-lettered"
        }
    };
    if as_json {
        let mut doc = serde_json::to_value(&record)
            .map_err(|e| Failure::store(format!("cannot write JSON: {e}")))?;
        doc["outcome"] = json!(outcome);
        say!("{doc}");
    } else {
        say_raw!("{text}");
        let note = match outcome {
            "abandoned" => "abandoned: back in the queue (--complete removes it)",
            "completed" => "completed: removed from the queue",
            _ => "dead-lettered",
        };
        say!("-- {note}");
    }
    Ok(())
}

/// `postbox purge`: removes every message of the queue in one commit.
pub fn purge(q: &Queue, as_json: bool) -> Outcome {
    // One commit removes them all, so there is nothing to stop half-way: a spinner shows that
    // the command is alive.
    let n = q.stats()?;
    let bar = if n.active + n.locked + n.scheduled + n.deferred > 10_000 {
        progress(None, &format!("purging {}", q.name()))
    } else {
        ProgressBar::hidden()
    };
    let removed = q.purge()?;
    bar.finish_and_clear();
    if as_json {
        say!("{}", json!({ "queue": q.name(), "purged": removed }));
    } else {
        say!("purged {} from {}", count(removed, "message"), q.name());
    }
    Ok(())
}

/// Which dead letters `redrive` moves: those matching every filter given.
pub struct RedriveFilter {
    pub reason: Option<String>,
    pub older_than: Option<Duration>,
    pub ids: Vec<u64>,
    pub limit: Option<usize>,
}

/// `postbox redrive`: resubmits the dead letters that match, one commit each, paced by
/// `rate` (messages per second).
pub fn redrive(
    q: &Queue,
    filter: &RedriveFilter,
    rate: Option<f64>,
    dry_run: bool,
    as_json: bool,
) -> Outcome {
    let dlq = q.dead_letters()?;
    let now = SystemTime::now();
    let ids: BTreeSet<u64> = filter.ids.iter().copied().collect();
    // Only ids are kept: a large dead-letter queue's bodies need not fit in memory.
    let mut chosen: Vec<postbox::MessageId> = Vec::new();
    for env in dlq.browse() {
        if stopping() {
            return Err(Failure::interrupted("choosing dead letters; none moved"));
        }
        let env = env?;
        if !ids.is_empty() && !ids.contains(&env.id().get()) {
            continue;
        }
        let info = env.dead_letter_info();
        if let Some(r) = &filter.reason
            && info.is_none_or(|d| &d.reason != r)
        {
            continue;
        }
        if let Some(age) = filter.older_than
            && info.is_none_or(|d| now.duration_since(d.at).unwrap_or(Duration::ZERO) < age)
        {
            continue;
        }
        if dry_run {
            if as_json {
                say!("{}", to_json(&Record::from_envelope(&env))?);
            } else {
                let reason = info.map_or("", |d| d.reason.as_str());
                say!("would resubmit {} ({reason})", env.id());
            }
        }
        chosen.push(env.id());
        if filter.limit.is_some_and(|n| chosen.len() >= n) {
            break;
        }
    }
    if dry_run {
        if !as_json {
            say!("{} match", count(chosen.len() as u64, "dead letter"));
        }
        return Ok(());
    }
    let bar = progress(Some(chosen.len() as u64), "resubmitting");
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let (moved, gone) = (AtomicU64::new(0), AtomicU64::new(0));
    let failed = AtomicBool::new(false);
    // Each resubmit is its own commit; without a rate, several threads let the store share
    // those commits (group commit). Order is kept either way: a resubmitted message keeps its
    // id, and the queue delivers by id.
    let workers = if rate.is_some() { 1 } else { REDRIVE_WORKERS };
    let work = || -> Outcome {
        loop {
            let i = next.fetch_add(1, Ordering::SeqCst);
            let Some(&id) = chosen.get(i) else {
                return Ok(());
            };
            if let Some(r) = rate {
                // Paced from the start, so a slow commit does not lower the rate; waited in
                // slices so that Ctrl-C is heard during a long pause.
                let due = started + Duration::from_secs_f64(i as f64 / r);
                while let Some(wait) = due.checked_duration_since(Instant::now()) {
                    if stopping() {
                        break;
                    }
                    std::thread::sleep(wait.min(Duration::from_millis(100)));
                }
            }
            if stopping() || failed.load(Ordering::SeqCst) {
                return Ok(());
            }
            let step = || -> Outcome {
                match dlq.receive_by_id(id, Duration::ZERO)? {
                    Some(m) => {
                        m.resubmit()?;
                        moved.fetch_add(1, Ordering::SeqCst);
                    }
                    // Taken, resubmitted or purged by someone else meanwhile.
                    None => {
                        gone.fetch_add(1, Ordering::SeqCst);
                    }
                }
                Ok(())
            };
            if let Err(f) = step() {
                failed.store(true, Ordering::SeqCst);
                return Err(f);
            }
            bar.inc(1);
        }
    };
    let results: Vec<Outcome> = std::thread::scope(|scope| {
        let console = crate::io::current();
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let console = console.clone();
                scope.spawn(move || {
                    // The stop token and a remote caller's streams follow the command's threads.
                    crate::io::enter(console);
                    work()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Failure::store("a redrive thread failed")))
            })
            .collect()
    });
    let (moved, gone) = (moved.into_inner(), gone.into_inner());
    if let Some(Err(f)) = results.into_iter().find(Result::is_err) {
        bar.abandon();
        return Err(Failure::new(
            f.code,
            format!("{f} (after resubmitting {moved} dead letters)"),
        ));
    }
    if stopping() {
        bar.abandon();
        return Err(Failure::interrupted(format!(
            "resubmitting {moved} of {} dead letters",
            chosen.len()
        )));
    }
    bar.finish_and_clear();
    if as_json {
        say!(
            "{}",
            json!({ "queue": q.name(), "resubmitted": moved, "skipped": gone })
        );
    } else {
        say!(
            "resubmitted {} to {}",
            count(moved, "dead letter"),
            q.name()
        );
        if gone > 0 {
            say!("{gone} were gone before their turn (taken or removed by another process)");
        }
    }
    Ok(())
}

/// Threads resubmitting at once in a redrive without a rate limit.
const REDRIVE_WORKERS: usize = 8;

/// Messages per transaction in `move`: few enough that a commit stays small, enough that the
/// fsync is shared.
const MOVE_BATCH: usize = 100;

/// `postbox move`: moves the receivable messages of `src` to `dst`, [`MOVE_BATCH`] at a time,
/// each batch atomically.
pub fn move_messages(
    store: &Store,
    src: &str,
    dst: &str,
    limit: Option<usize>,
    create: bool,
    as_json: bool,
) -> Outcome {
    if src == dst {
        return Err(Failure::usage("source and destination are the same queue"));
    }
    let from = store.open_queue(src)?;
    let to = target_queue(store, dst, create)?;
    let total = from.stats()?.active;
    let want = limit.map_or(total, |n| total.min(n as u64));
    let bar = progress(Some(want), &format!("moving to {dst}"));
    let mut moved = 0usize;
    loop {
        if stopping() {
            bar.abandon();
            return Err(Failure::interrupted(format!("moving {moved} messages")));
        }
        let room = limit.map_or(MOVE_BATCH, |n| n.saturating_sub(moved).min(MOVE_BATCH));
        if room == 0 {
            break;
        }
        // Two commits per batch: one locks the batch, the transaction then sends the copies
        // and completes the originals together. A transaction's own receives and sends would
        // each commit apart in a multi-process store (locks and id reservations are written at
        // once). If this process dies in between, its locks are released and nothing moved.
        let got = from.receive_batch(room, Duration::ZERO)?;
        let n = got.len();
        if n == 0 {
            break;
        }
        let mut tx = store.try_begin()?;
        tx.send_batch_checked(&to, got.iter().map(|m| m.envelope().to_message()))?;
        for m in got {
            tx.complete(m)?;
        }
        tx.commit()?;
        moved += n;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    if as_json {
        say!("{}", json!({ "from": src, "to": dst, "moved": moved }));
    } else {
        say!(
            "moved {} from {src} to {dst}",
            count(moved as u64, "message")
        );
    }
    Ok(())
}
