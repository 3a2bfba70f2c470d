//! I/O errors at every step of a scenario. A layer under both of the store's files counts
//! every read, write, set_len and sync and fails number N — once, or from N on (a disk that
//! died) — for each N across the whole scenario, with and without the write-ahead log. For
//! every N:
//!
//! - every call returns `Ok` or a typed error; nothing panics or hangs;
//! - after the faults stop, the store is opened again (without the layer), after a clean close
//!   and as a kill -9 before the close would have left it, and holds every
//!   send that returned `Ok`, and nothing whose completion returned `Ok` (a message may be
//!   missing only when the call taking it failed, whose outcome is unknown to its caller);
//! - a batch is all there or not at all;
//! - a fault while the store is being created (the scenario starts on a new path) leaves no
//!   store or a complete one, and no temporary file.
//!
//! One more test fails exactly the write of a small send's log record (written with its sync
//! while redb applies the send on another thread) and checks the same of what follows.
//!
//! Knobs: `POSTBOX_IOFAULT_STEP` (test every Nth fault point, default 3; 1 for the long tier),
//! `POSTBOX_IOFAULT_OPS` (operations of the scenario, default 24).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use postbox::{Error, Message, Store};
use postbox_testkit::env_u64;

#[path = "common/layer.rs"]
mod layer;
use layer::{Io, Tap, Which};

/// Fails operation number `at` (counting from 1), and every later one if `persist`.
#[derive(Debug)]
struct Faults {
    seen: AtomicU64,
    at: u64,
    persist: bool,
    injected: AtomicU64,
}

impl Tap for Faults {
    fn before(&self, _which: Which, io: &Io<'_>) -> io::Result<()> {
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if n == self.at || (self.persist && n > self.at) {
            self.injected.fetch_add(1, Ordering::Relaxed);
            return Err(match io {
                // What a failing disk gives.
                Io::Sync | Io::Write(..) | Io::Read => io::Error::from_raw_os_error(5),
                Io::SetLen(_) => io::Error::from_raw_os_error(28),
            });
        }
        Ok(())
    }
}

/// What the scenario was told.
#[derive(Default)]
struct Told {
    sent: BTreeMap<u64, String>,
    completed: BTreeSet<u64>,
    /// Messages whose taking failed: their completion may or may not have happened.
    unsure: BTreeSet<u64>,
    /// Bodies of the messages completed or unsure (a batch's members may be among them).
    taken: BTreeSet<String>,
    errors: u64,
}

/// Every error must be one of postbox's typed errors with a message; a panic would have
/// unwound out of the call already.
fn typed(e: &Error, told: &mut Told) {
    assert!(!e.to_string().is_empty());
    told.errors += 1;
}

/// The scenario: sends, batches, completions and transactions, through the layer.
fn scenario(path: &Path, log: bool, tap: Arc<Faults>, ops: u64) -> Told {
    let mut told = Told::default();
    let store = match Store::builder()
        .write_ahead_log(log)
        .storage_layer(layer::layer(tap))
        .open(path)
    {
        Ok(s) => s,
        Err(e) => {
            typed(&e, &mut told);
            return told;
        }
    };
    let q = match store.queue("q") {
        Ok(q) => q,
        Err(e) => {
            typed(&e, &mut told);
            let _ = store.close();
            return told;
        }
    };
    for i in 0..ops {
        match i % 4 {
            0 => match q.send(Message::new(format!("m{i}"))) {
                Ok(id) => {
                    told.sent.insert(id.get(), format!("m{i}"));
                }
                Err(e) => typed(&e, &mut told),
            },
            1 => match q.send_batch((0..3).map(|k| Message::new(format!("b{i}.{k}")))) {
                Ok(ids) => {
                    for (k, id) in ids.iter().enumerate() {
                        told.sent.insert(id.get(), format!("b{i}.{k}"));
                    }
                }
                Err(e) => typed(&e, &mut told),
            },
            2 => match q.try_receive() {
                Ok(Some(m)) => {
                    let id = m.id().get();
                    told.taken
                        .insert(String::from_utf8_lossy(m.body()).into_owned());
                    match m.complete() {
                        Ok(()) => {
                            told.completed.insert(id);
                        }
                        Err(e) => {
                            told.unsure.insert(id);
                            typed(&Error::from(e), &mut told);
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => typed(&e, &mut told),
            },
            _ => {
                let mut tx = store.begin();
                match tx.receive(&q, Duration::ZERO) {
                    Ok(Some(m)) => {
                        let id = m.id().get();
                        told.taken
                            .insert(String::from_utf8_lossy(m.body()).into_owned());
                        let body = format!("follow-up-of-{id}");
                        let sent = tx.send(&q, Message::new(body.clone()));
                        match sent.and_then(|s| tx.commit().map(|()| s)) {
                            Ok(s) => {
                                told.completed.insert(id);
                                told.sent.insert(s.get(), body);
                            }
                            Err(e) => {
                                told.unsure.insert(id);
                                typed(&e, &mut told);
                            }
                        }
                    }
                    Ok(None) => {}
                    Err(e) => typed(&e, &mut told),
                }
            }
        }
    }
    // What a kill -9 now would leave: the files as they are, the log not yet checkpointed.
    let crashed = path.with_extension("crashed");
    let log = |p: &Path| {
        let mut name = p.as_os_str().to_owned();
        name.push("-log");
        std::path::PathBuf::from(name)
    };
    if std::fs::copy(path, &crashed).is_ok() {
        let _ = std::fs::copy(log(path), log(&crashed));
    }
    drop(q);
    if let Err(e) = store.close() {
        typed(&e, &mut told);
    }
    told
}

/// Opens the store without faults and checks it against what the scenario was told.
fn check(path: &Path, told: &Told, what: &str) {
    let store = Store::open(path).unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
    let q = store
        .queue("q")
        .unwrap_or_else(|e| panic!("{what}: queue: {e}"));
    let mut present = BTreeMap::new();
    for m in q.browse() {
        let m = m.unwrap_or_else(|e| panic!("{what}: browse: {e}"));
        present.insert(m.id().get(), String::from_utf8_lossy(m.body()).into_owned());
    }
    for (id, body) in &told.sent {
        match present.get(id) {
            Some(_) if told.completed.contains(id) => {
                panic!("{what}: completed message {id} is back")
            }
            Some(found) => assert_eq!(found, body, "{what}: message {id}"),
            None => assert!(
                told.completed.contains(id) || told.unsure.contains(id),
                "{what}: acknowledged message {id} ({body}) is lost"
            ),
        }
    }
    let mut batches: BTreeMap<&str, usize> = BTreeMap::new();
    for body in present.values() {
        if let Some((tag, _)) = body.split_once('.') {
            *batches.entry(tag).or_default() += 1;
        }
    }
    // A batch is all there but for members a later call took, or not there at all.
    let bodies: BTreeSet<&String> = present.values().collect();
    for (tag, n) in batches {
        let taken = told
            .taken
            .iter()
            .filter(|b| b.starts_with(&format!("{tag}.")) && !bodies.contains(b))
            .count();
        assert!(
            n + taken == 3,
            "{what}: batch {tag} is {n} of 3 messages ({taken} taken)"
        );
    }
    drop(q);
    store.close().unwrap();
}

fn sweep(log: bool) {
    let ops = env_u64("POSTBOX_IOFAULT_OPS", 24);
    let step = env_u64("POSTBOX_IOFAULT_STEP", 3).max(1);
    // A clean run counts the operations a fault can land on.
    let dir = tempfile::tempdir().unwrap();
    let clean = Arc::new(Faults {
        seen: AtomicU64::new(0),
        at: 0,
        persist: false,
        injected: AtomicU64::new(0),
    });
    let told = scenario(&dir.path().join("clean.postbox"), log, clean.clone(), ops);
    assert_eq!(told.errors, 0, "the clean run failed");
    let total = clean.seen.load(Ordering::Relaxed);
    let (mut runs, mut injected, mut errors) = (0, 0, 0);
    for persist in [false, true] {
        let mut at = 1;
        while at <= total {
            let path = dir.path().join(format!("f-{persist}-{at}.postbox"));
            let tap = Arc::new(Faults {
                seen: AtomicU64::new(0),
                at,
                persist,
                injected: AtomicU64::new(0),
            });
            let told = scenario(&path, log, tap.clone(), ops);
            let what = format!(
                "log {log}, fault at operation {at} of {total}{}",
                if persist { " and after" } else { "" }
            );
            // A creation that failed leaves nothing behind: no store, no temporary file.
            let leftovers: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".creating-"))
                .collect();
            assert!(leftovers.is_empty(), "{what}: left {leftovers:?}");
            if path.exists() {
                check(&path, &told, &what);
            } else {
                assert!(told.errors > 0, "{what}: no store and no error");
            }
            let crashed = path.with_extension("crashed");
            if crashed.exists() {
                check(&crashed, &told, &format!("{what}, killed before closing"));
            }
            runs += 1;
            injected += tap.injected.load(Ordering::Relaxed);
            errors += told.errors;
            at += step;
        }
    }
    println!(
        "log {log}: {total} fault points, {runs} runs, {injected} faults injected, \
         {errors} typed errors returned, 0 violations"
    );
}

#[test]
fn every_io_error_is_typed_and_nothing_acknowledged_is_lost_with_the_log() {
    sweep(true);
}

#[test]
fn every_io_error_is_typed_and_nothing_acknowledged_is_lost_without_the_log() {
    sweep(false);
}

/// Fails the next write to the log once armed.
#[derive(Debug, Default)]
struct FailNextLogWrite {
    armed: std::sync::atomic::AtomicBool,
}

impl Tap for FailNextLogWrite {
    fn before(&self, which: Which, io: &Io<'_>) -> io::Result<()> {
        if matches!(which, Which::Log)
            && matches!(io, Io::Write(..))
            && self.armed.swap(false, Ordering::AcqRel)
        {
            return Err(io::Error::from_raw_os_error(5));
        }
        Ok(())
    }
}

/// A small send's record is written with its sync while redb already applies the send on
/// another thread. When that write fails, the caller hears `OutcomeUnknown`, the store reopens
/// and starts a new log cycle (redb may hold the send while the log does not), and what is
/// acknowledged afterwards survives a kill -9 as well as a clean close.
#[test]
fn a_failed_write_of_a_small_sends_record_loses_nothing_acknowledged_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let tap = Arc::new(FailNextLogWrite::default());
    let store = Store::builder()
        .storage_layer(layer::layer(tap.clone()))
        .open(&path)
        .unwrap();
    let q = store.queue("q").unwrap();
    let mut acked = BTreeSet::new();
    for i in 0..3 {
        q.send(Message::new(format!("before-{i}"))).unwrap();
        acked.insert(format!("before-{i}"));
    }
    tap.armed.store(true, Ordering::Release);
    match q.send(Message::new("failed")) {
        Err(Error::OutcomeUnknown(_)) => {}
        other => panic!("the send whose record failed: {other:?}"),
    }
    for i in 0..3 {
        q.send(Message::new(format!("after-{i}"))).unwrap();
        acked.insert(format!("after-{i}"));
    }
    let crashed = dir.path().join("crashed.postbox");
    std::fs::copy(&path, &crashed).unwrap();
    std::fs::copy(
        dir.path().join("s.postbox-log"),
        dir.path().join("crashed.postbox-log"),
    )
    .unwrap();
    drop(q);
    store.close().unwrap();
    for p in [&crashed, &path] {
        let store = Store::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let q = store.queue("q").unwrap();
        let held: BTreeSet<String> = q
            .browse()
            .map(|m| String::from_utf8_lossy(m.unwrap().body()).into_owned())
            .filter(|b| b != "failed")
            .collect();
        assert_eq!(held, acked, "{}", p.display());
        drop(q);
        store.close().unwrap();
    }
}
