//! A store that crashed needs its write-ahead log: a single-process writer is killed with
//! SIGKILL while its log holds about a thousand acknowledged records, and the log is then
//! deleted, cut (to nothing, to its header page, inside its records), zeroed, replaced by a
//! copy from an earlier cycle or by another store's log. Each open must refuse with
//! `Corrupted` and a message that names the log and what is wrong with it — never open with
//! acknowledged work missing. With `accept_log_loss` the store opens anyway and reports what
//! it could not replay. A new store created where a crashed store's file was deleted never
//! replays the stray log left beside it: the log is moved aside.
//! (`docs/design.md` § Write-ahead log, "What the store knows of its log".)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use postbox::{ErrorKind, Store};
use postbox_tests::{Proc, arg, num};

const CHILD: &str = env!("CARGO_BIN_EXE_pbx-child");

/// Acknowledged calls a writer makes before it is killed.
const CALLS: usize = 1000;

/// What a killed writer acknowledged.
#[derive(Default, Clone)]
struct Acked {
    sent: BTreeMap<u64, String>,
    got: BTreeSet<u64>,
    done: BTreeSet<u64>,
}

impl Acked {
    fn take(&mut self, line: &str) {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.first() {
            Some(&"SENT") => {
                self.sent.insert(num(w[1]), w[2].to_string());
            }
            Some(&"GOT") => {
                self.got.insert(num(w[1]));
            }
            Some(&"DONE") => {
                self.done.insert(num(w[1]));
            }
            Some(&"ERR") => panic!("child failed: {line}"),
            _ => {}
        }
    }

    /// The acknowledged sends a store must hold: not completed, not possibly completed.
    fn must_hold(&self) -> impl Iterator<Item = (&u64, &String)> {
        self.sent
            .iter()
            .filter(|(id, _)| !self.done.contains(id) && !self.got.contains(id))
    }
}

fn log_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-log");
    name.into()
}

/// Runs a logging writer on `path` (no checkpoint while it runs) and kills it after `CALLS`
/// acknowledged calls.
fn crash_writer(path: &Path, tag: &str, acked: &mut Acked) {
    let mut child = Proc::spawn(
        CHILD,
        &format!("logged-{tag}"),
        &[
            "logged",
            arg(path),
            "logged",
            tag,
            &(1u64 << 30).to_string(),
            "3600000",
        ],
    );
    child.expect("READY");
    for _ in 0..CALLS {
        let line = child.next_line().expect("the writer stopped");
        acked.take(&line);
    }
    for line in child.kill9() {
        acked.take(&line);
    }
    assert!(log_of(path).exists(), "no log after the crash");
}

/// A copy of the crashed store (and its log, if `log` is given) in `dir`.
fn copy_store(from: &Path, dir: &Path, name: &str, log: Option<&[u8]>) -> PathBuf {
    let to = dir.join(name);
    std::fs::copy(from, &to).unwrap();
    if let Some(log) = log {
        std::fs::write(log_of(&to), log).unwrap();
    }
    to
}

/// Opens `path` and checks that every acknowledged send is there with its body.
fn holds_everything(path: &Path, acked: &Acked) -> u64 {
    let store = Store::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let replayed = store.stats().replayed_records;
    let q = store.queue("logged").unwrap();
    let present: BTreeMap<u64, String> = q
        .browse()
        .map(|m| {
            let m = m.unwrap();
            (m.id().get(), String::from_utf8(m.body().to_vec()).unwrap())
        })
        .collect();
    for (id, body) in acked.must_hold() {
        assert_eq!(present.get(id), Some(body), "acknowledged send {id}");
    }
    for id in &acked.done {
        assert!(!present.contains_key(id), "completed {id} came back");
    }
    drop(q);
    store.close().unwrap();
    replayed
}

/// Opening `path` fails with `Corrupted` whose text names the log and contains `why`.
fn refused(path: &Path, why: &str) {
    let e = match Store::open(path) {
        Ok(_) => panic!(
            "{}: opened without the work its log held ({why})",
            path.display()
        ),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::Corrupted, "{why}: {e}");
    let text = e.to_string();
    assert!(text.contains(why), "{why}: {text}");
    assert!(
        text.contains("-log") && text.contains("accept"),
        "the message names the log and the way out: {text}"
    );
    // The refusal changed nothing: a second open says the same.
    assert_eq!(Store::open(path).unwrap_err().kind(), ErrorKind::Corrupted);
}

#[test]
fn a_crashed_store_refuses_to_open_without_the_log_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.postbox");
    let mut acked = Acked::default();
    crash_writer(&a, "a1", &mut acked);
    // A copy of this cycle's log, for the "earlier cycle" case below.
    let first_log = std::fs::read(log_of(&a)).unwrap();
    let first_acked = acked.clone();
    // The next writer replays that log, starts a new cycle and is killed in turn.
    crash_writer(&a, "a2", &mut acked);
    let crashed = std::fs::read(&a).unwrap();
    let log = std::fs::read(log_of(&a)).unwrap();
    let used = log.iter().rposition(|b| *b != 0).unwrap() + 1;
    assert!(used > 64 << 10, "the log holds about {CALLS} records");
    let work = tempfile::tempdir().unwrap();

    // Undamaged, the copy holds everything acknowledged.
    let intact = copy_store(&a, work.path(), "intact.postbox", Some(&log));
    assert!(holds_everything(&intact, &acked) > 0, "nothing replayed");
    assert!(holds_everything(&intact, &acked) == 0, "replayed twice");

    let case = |name: &str, log: Option<Vec<u8>>, why: &str| {
        let p = work.path().join(format!("{name}.postbox"));
        std::fs::write(&p, &crashed).unwrap();
        if let Some(l) = log {
            std::fs::write(log_of(&p), l).unwrap();
        }
        refused(&p, why);
        p
    };
    let deleted = case("deleted", None, "is missing");
    case("empty", Some(Vec::new()), "has no header");
    case("header-only", Some(log[..4096].to_vec()), "shorter than");
    let cut = case("cut", Some(log[..used / 2].to_vec()), "shorter than");
    case("zeroed", Some(vec![0; log.len()]), "has no header");
    case("earlier-cycle", Some(first_log.clone()), "another cycle");

    // Another store's log, both crashed with records numbered from the start.
    let b = dir.path().join("b.postbox");
    let mut acked_b = Acked::default();
    crash_writer(&b, "b1", &mut acked_b);
    let other = case(
        "other-store",
        Some(std::fs::read(log_of(&b)).unwrap()),
        "belongs to another store",
    );
    // B itself still has its own.
    holds_everything(&b, &acked_b);

    // Accepting the loss: the store opens, says what it could not replay, and works.
    for (p, expect_some) in [(&deleted, false), (&cut, true), (&other, false)] {
        let store = Store::builder()
            .accept_log_loss(true)
            .open(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let loss = store.log_loss().expect("the loss is reported").to_owned();
        assert!(loss.contains("-log"), "{loss}");
        let q = store.queue("logged").unwrap();
        let present: BTreeSet<u64> = q.browse().map(|m| m.unwrap().id().get()).collect();
        // Everything the first cycle acknowledged was checkpointed by the second open.
        for (id, _) in first_acked.must_hold() {
            if !acked.done.contains(id) && !acked.got.contains(id) {
                assert!(
                    present.contains(id),
                    "{}: {id} of the first cycle",
                    p.display()
                );
            }
        }
        let replayed = store.stats().replayed_records;
        assert_eq!(replayed > 0, expect_some, "{}: {loss}", p.display());
        q.send("after recovery").unwrap();
        drop(q);
        store.close().unwrap();
        // The damaged log was kept aside; the store is whole again and needs no log.
        let store = Store::open(p).unwrap();
        assert_eq!(store.log_loss(), None);
        store.close().unwrap();
    }
    // The cut log's salvaged records are the ones before the cut: a prefix of the sends.
    let aside: Vec<_> = std::fs::read_dir(work.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("-log.damaged-"))
        .collect();
    assert_eq!(aside.len(), 2, "{aside:?}");
}

#[test]
fn a_new_store_never_replays_a_stray_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let mut acked = Acked::default();
    crash_writer(&path, "s1", &mut acked);
    // The store file goes; its log stays.
    std::fs::remove_file(&path).unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.stats().replayed_records, 0);
    assert!(
        store.queues().unwrap().is_empty(),
        "a new store has no queues"
    );
    store.close().unwrap();
    let stray: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("s.postbox-log.stray-"))
        .collect();
    assert_eq!(stray.len(), 1, "the stray log was kept aside: {stray:?}");
    // A store closed cleanly ignores a foreign log beside it the same way.
    let other = dir.path().join("o.postbox");
    let mut acked_o = Acked::default();
    crash_writer(&other, "o1", &mut acked_o);
    std::fs::copy(log_of(&other), log_of(&path)).unwrap();
    let store = Store::open(&path).unwrap();
    assert!(store.queues().unwrap().is_empty());
    store.close().unwrap();
}
