//! Crash checker scenarios: worker processes (`pbx-jepsen`) send, receive, settle and move
//! messages in transactions, each appending its events to a log of its own; they are killed
//! with SIGKILL (`TerminateProcess` on Windows; or stopped with SIGSTOP, on Unix) at random
//! moments and restarted. At the end the
//! store is drained and `postbox_tests::history::check` classifies every message from the logs
//! and the store's contents: nothing acknowledged lost, nothing completed twice or received
//! after its completion, delivery counts growing, transactions atomic, batches whole,
//! resends of a keyed message deduplicated.
//!
//! Size: `POSTBOX_JEPSEN_KILLS` kills per crash scenario (default 40 × `POSTBOX_STRESS`).
//! Kill moments are aimed by the workers' own output: after a random number of events, right
//! after a big batch's `TRY` (so inside its commit, holding the store's write lock), or right
//! after a fresh open began (so inside its recovery), plus a random delay of a few ms.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use postbox::Store;
use postbox_tests::history::{
    self, Event, Found, Record, Report, TryKind, parse_record, read_log, token_of,
};
use postbox_tests::{Guard, Proc, Rng, arg, env_u64, stress};
#[cfg(unix)]
use {
    postbox::Message,
    postbox_tests::history::{Logger, Op},
};

const WORKER: &str = env!("CARGO_BIN_EXE_pbx-jepsen");
const QUEUE: &str = "work";

fn kills() -> u64 {
    env_u64("POSTBOX_JEPSEN_KILLS", 40 * stress()).max(1)
}

/// The store, the logs of every incarnation of every worker, and how to start one.
struct Cluster {
    dir: tempfile::TempDir,
    store: PathBuf,
    multi: bool,
    logs: Vec<PathBuf>,
    seed: u64,
}

impl Cluster {
    fn new(multi: bool, seed: u64) -> Cluster {
        let mut dir = tempfile::tempdir().unwrap();
        // Keep the logs of a run for a post-mortem.
        dir.disable_cleanup(std::env::var_os("POSTBOX_JEPSEN_KEEP").is_some());
        let store = dir.path().join("jepsen.postbox");
        Cluster {
            dir,
            store,
            multi,
            logs: Vec::new(),
            seed,
        }
    }

    /// Starts a new incarnation of worker `slot` with `flags`; a keyed send the slot's previous
    /// incarnation left unanswered is retried first, as a client would after a crash.
    fn spawn(&mut self, slot: &str, flags: &[&str], previous: Option<&Path>) -> (Proc, PathBuf) {
        let n = self.logs.len();
        let name = format!("{slot}-{n}");
        let log = self.dir.path().join(format!("{name}.log"));
        self.logs.push(log.clone());
        let seed = (self.seed ^ (n as u64).wrapping_mul(0x9E37_79B9)).to_string();
        let mut args: Vec<String> = vec![
            arg(&self.store).into(),
            arg(&log).into(),
            name.clone(),
            "--seed".into(),
            seed,
        ];
        if self.multi {
            args.push("--multi".into());
        }
        args.extend(flags.iter().map(|s| (*s).to_owned()));
        for token in previous.map(unanswered_keys).unwrap_or_default() {
            args.push("--retry".into());
            args.push(token);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        (Proc::spawn(WORKER, &name, &args), log)
    }

    fn histories(&self) -> Vec<Vec<Record>> {
        self.logs.iter().map(|p| read_log(p)).collect()
    }

    /// Reads everything the store holds (queue and dead-letter queue), then checks that every
    /// message of the queue can be received: no lock outlived its holder.
    fn drain(&self) -> Vec<Found> {
        let store = Store::builder()
            .multi_process(self.multi)
            .open(&self.store)
            .expect("the store opens after the last kill");
        let q = store.queue(QUEUE).unwrap();
        let mut found = Vec::new();
        for e in q.browse() {
            let e = e.unwrap();
            found.push(Found {
                id: e.id().get(),
                token: token_of(e.body()),
                dc: e.delivery_count(),
                dead_lettered: false,
            });
        }
        let live: BTreeSet<u64> = found.iter().map(|f| f.id).collect();
        for e in q.dead_letters().unwrap().browse() {
            let e = e.unwrap();
            found.push(Found {
                id: e.id().get(),
                token: token_of(e.body()),
                dc: e.delivery_count(),
                dead_lettered: true,
            });
        }
        let s = q.stats().unwrap();
        assert_eq!(
            s.active + s.locked + s.scheduled,
            live.len() as u64,
            "counts {s:?}"
        );
        let guard = Guard::new(
            Duration::from_secs(60),
            "every message of the queue to be receivable",
        );
        // Completed as they come, a batch per commit (the contents are recorded already):
        // held together they would outlive their lock on a slow machine and come round again.
        let mut taken = BTreeSet::new();
        while taken.len() < live.len() {
            guard.check();
            let batch = q.receive_batch(256, guard.left()).unwrap();
            assert!(!batch.is_empty(), "a message still locked by a dead holder");
            for m in &batch {
                let id = m.id().get();
                assert!(
                    live.contains(&id),
                    "received {id}, which browse did not list"
                );
                assert!(taken.insert(id), "received {id} twice");
            }
            q.complete_batch(batch).unwrap();
        }
        assert!(q.try_receive().unwrap().is_none());
        drop(q);
        store.close().unwrap();
        found
    }

    /// Drains, checks, prints the summary, and fails on any violation.
    fn verdict(&self, scenario: &str, summary: &str) -> Report {
        let found = self.drain();
        let report = history::check(&self.histories(), &found, &[]);
        eprintln!("jepsen {scenario}: {summary}; {}", report.summary());
        assert_eq!(
            report.violations(),
            0,
            "{scenario}: violations (logs kept in {}):\n{}",
            self.dir.path().display(),
            report.details.join("\n")
        );
        report
    }
}

/// Keyed tokens a log tried but saw no answer for.
fn unanswered_keys(log: &Path) -> Vec<String> {
    let mut tried = Vec::new();
    let mut answered = BTreeSet::new();
    for r in read_log(log) {
        match r.event {
            Event::Try {
                kind: TryKind::Key,
                tokens,
            } => tried.extend(tokens),
            Event::Sent { acks } => answered.extend(acks.into_iter().map(|(t, _)| t)),
            _ => {}
        }
    }
    tried.retain(|t| !answered.contains(t));
    tried
}

/// The next event a worker echoed.
fn next_event(p: &mut Proc) -> Event {
    let line = p.line();
    parse_record(&line)
        .unwrap_or_else(|| panic!("{}: bad line {line:?}", p.name))
        .event
}

/// How a kill was aimed.
#[derive(Default)]
struct Aim {
    kills: u64,
    in_open: u64,
    in_big: u64,
    /// Kills aimed at an open that landed before it returned.
    open_unfinished: u64,
    /// Kills of a process hunted while it may hold the store file's write lock, and of those,
    /// kills of a process caught holding it.
    hunted: u64,
    writer: u64,
}

impl Aim {
    fn summary(&self) -> String {
        let mut out = format!(
            "{} kills ({} aimed at an open, {} of them before it returned; {} at a big batch's \
             commit",
            self.kills, self.in_open, self.open_unfinished, self.in_big
        );
        if self.hunted > 0 {
            out += &format!(
                "; {} of {} hunted caught holding the write lock",
                self.writer, self.hunted
            );
        }
        out + ")"
    }
}

/// Whether process `pid` holds a write lock on the file with inode `ino`: Linux lists the
/// granted locks of each descriptor in `/proc/<pid>/fdinfo` (redb's writer lock is an OFD
/// lock, whose owner `/proc/locks` does not name). Waiting requests are shown with `->`.
#[cfg(target_os = "linux")]
fn holds_write_lock(pid: u32, ino: u64) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return false;
    };
    let needle = format!(":{ino} ");
    fds.flatten().any(|fd| {
        std::fs::read_to_string(fd.path()).is_ok_and(|info| {
            info.lines().any(|l| {
                l.starts_with("lock:")
                    && l.contains("OFDLCK")
                    && l.contains(" WRITE ")
                    && !l.contains("->")
                    && l.contains(&needle)
            })
        })
    })
}

/// Waits for the worker's next big batch, then stops it at random moments until it is caught
/// holding the store file's write lock, and kills it there (after 300 misses, wherever it is).
/// Returns whether it was caught holding the lock. Linux only: it needs the lock table of
/// `holds_write_lock` and SIGSTOP.
#[cfg(target_os = "linux")]
fn kill_writer(p: &mut Proc, ino: u64, rng: &mut Rng) -> bool {
    for _ in 0..2000 {
        if let Event::Try {
            kind: TryKind::Big, ..
        } = next_event(p)
        {
            break;
        }
    }
    // A commit holds the lock for a small part of its time (a lone producer was seen holding
    // it in about one sample of thirty), so many short looks.
    for _ in 0..300 {
        std::thread::sleep(Duration::from_micros(rng.below(500)));
        p.signal(libc::SIGSTOP);
        if holds_write_lock(p.pid(), ino) {
            p.kill9_alive();
            return true;
        }
        p.signal(libc::SIGCONT);
    }
    p.kill9_alive();
    false
}

/// Waits until the worker reaches the aimed moment, then a random few ms more, and kills it.
/// `Some(n)`: after `n` more events; `None`: after its next big batch's `TRY` (or 2,000
/// events, if none comes).
fn kill_after(p: &mut Proc, aim: Option<u64>, rng: &mut Rng, max_delay_us: u64) {
    match aim {
        Some(n) => {
            for _ in 0..n {
                next_event(p);
            }
        }
        None => {
            for _ in 0..2000 {
                if let Event::Try {
                    kind: TryKind::Big, ..
                } = next_event(p)
                {
                    break;
                }
            }
        }
    }
    std::thread::sleep(Duration::from_micros(rng.below(max_delay_us)));
    p.kill9_alive();
}

/// Starts a worker and kills it within the first few ms of its open: with the write-ahead log
/// on, that open is replaying what the previous kill left.
fn kill_in_open(
    c: &mut Cluster,
    aim: &mut Aim,
    slot: &str,
    flags: &[&str],
    prev: &Path,
    rng: &mut Rng,
) -> PathBuf {
    let (mut p, log) = c.spawn(slot, flags, Some(prev));
    assert_eq!(next_event(&mut p), Event::Open);
    std::thread::sleep(Duration::from_micros(rng.below(5000)));
    p.kill9_alive();
    aim.kills += 1;
    aim.in_open += 1;
    // The log is the record: a line may be in it and not yet echoed.
    let opened = read_log(&log).iter().any(|r| r.event == Event::Opened);
    aim.open_unfinished += u64::from(!opened);
    log
}

/// One process at a time does every role with threads, in a single-process store (through
/// the write-ahead log); it is killed at a random moment and restarted.
#[test]
fn single_process_killed_and_restarted() {
    let mut rng = Rng::from_env("jepsen single");
    let mut c = Cluster::new(false, rng.next_u64());
    let flags = [
        "--producers",
        "2",
        "--consumers",
        "2",
        "--tx",
        "1",
        "--big",
        "--lock-ms",
        "2000",
    ];
    let mut aim = Aim::default();
    let mut prev: Option<PathBuf> = None;
    while aim.kills < kills() {
        let roll = rng.below(100);
        if roll < 15 && prev.is_some() {
            prev = Some(kill_in_open(
                &mut c,
                &mut aim,
                "all",
                &flags,
                prev.as_deref().unwrap(),
                &mut rng,
            ));
        } else {
            let (mut p, log) = c.spawn("all", &flags, prev.as_deref());
            if roll < 30 {
                kill_after(&mut p, None, &mut rng, 3000);
                aim.in_big += 1;
            } else {
                kill_after(&mut p, Some(1 + rng.below(200)), &mut rng, 3000);
            }
            prev = Some(log);
            aim.kills += 1;
        }
    }
    c.verdict("single-process", &aim.summary());
}

/// Several producer and consumer processes share a multi-process store; random ones are
/// killed and restarted, some inside their open, some caught (stopped, then killed) holding
/// the store's write lock, mostly inside a big batch's commit.
#[test]
fn multi_process_random_kills() {
    let mut rng = Rng::from_env("jepsen multi");
    let mut c = Cluster::new(true, rng.next_u64());
    Store::builder()
        .multi_process(true)
        .open(&c.store)
        .unwrap()
        .close()
        .unwrap();
    let slots: [(&str, &[&str]); 5] = [
        ("p0", &["--producers", "1", "--big"]),
        ("p1", &["--producers", "1"]),
        ("c0", &["--consumers", "2"]),
        ("c1", &["--consumers", "2"]),
        ("t0", &["--tx", "1"]),
    ];
    #[cfg(target_os = "linux")]
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&c.store).unwrap());
    let mut procs: Vec<(Proc, PathBuf)> = slots
        .iter()
        .map(|(slot, flags)| c.spawn(slot, flags, None))
        .collect();
    let mut aim = Aim::default();
    while aim.kills < kills() {
        // One kill in four goes to the big producer right after a big batch's TRY: inside its
        // commit, while it holds the store's write lock.
        let big = rng.below(4) == 0;
        let v = if big {
            0
        } else {
            rng.below(slots.len() as u64) as usize
        };
        let (slot, flags) = slots[v];
        let p = &mut procs[v].0;
        if big {
            // Hunted holding the write lock where the system shows locks (Linux); elsewhere
            // killed right after the big batch's TRY, inside its commit.
            #[cfg(target_os = "linux")]
            {
                aim.writer += u64::from(kill_writer(p, ino, &mut rng));
                aim.hunted += 1;
            }
            #[cfg(not(target_os = "linux"))]
            kill_after(p, None, &mut rng, 2000);
            aim.in_big += 1;
        } else {
            kill_after(p, Some(1 + rng.below(30)), &mut rng, 2000);
        }
        aim.kills += 1;
        let mut prev = procs[v].1.clone();
        if rng.below(100) < 15 {
            prev = kill_in_open(&mut c, &mut aim, slot, flags, &prev, &mut rng);
        }
        procs[v] = c.spawn(slot, flags, Some(&prev));
    }
    for (p, _) in &mut procs {
        p.kill9_alive();
    }
    drop(procs);
    c.verdict("multi-process", &aim.summary());
}

/// A consumer is stopped (SIGSTOP) while it holds a message, past the lock's 300 ms; another
/// consumer takes the message and completes it; when the first continues, its completion must
/// fail with `LockLost`, and the message is completed exactly once. Unix only: Windows has no
/// stop signal (suspending a process's threads there takes effect some time after the call
/// returns, so the test could not know the holder was stopped); the late settle's `LockLost`
/// itself runs everywhere in `core/tests/ops_peek_lock.rs`.
#[cfg(unix)]
#[test]
fn stopped_holder_loses_its_lock() {
    let mut rng = Rng::from_env("jepsen stop");
    let mut c = Cluster::new(true, rng.next_u64());
    let lock = ["--lock-ms", "300", "--consumers", "1", "--complete-only"];
    let (mut a, a_log) = c.spawn("a", &[&lock[..], &["--hold-ms", "150"]].concat(), None);
    assert_eq!(next_event(&mut a), Event::Open);
    assert_eq!(next_event(&mut a), Event::Opened);
    let store = Store::builder().multi_process(true).open(&c.store).unwrap();
    let q = store.queue(QUEUE).unwrap();
    let parent_log = c.dir.path().join("parent.log");
    c.logs.push(parent_log.clone());
    let parent = Logger::create(&parent_log, false).unwrap();

    let rounds = 3 * stress();
    let (mut lost, mut skipped) = (0, 0);
    for round in 0..rounds + 10 {
        if lost == rounds {
            break;
        }
        let token = format!("parent.{round}");
        parent.log(&Event::Try {
            kind: TryKind::One,
            tokens: vec![token.clone()],
        });
        let id = q.send(Message::new(token.clone())).unwrap().get();
        parent.log(&Event::Sent {
            acks: vec![(token, id)],
        });
        loop {
            if let Event::Recv { id: got, .. } = next_event(&mut a) {
                assert_eq!(got, id, "A received another message");
                break;
            }
        }
        a.signal(libc::SIGSTOP);
        // The file shows whether A began its completion before the stop took hold.
        let began = read_log(&a_log)
            .iter()
            .any(|r| matches!(r.event, Event::Settling { id: s, op: Op::Complete, .. } if s == id));
        if began {
            a.signal(libc::SIGCONT);
            skipped += 1;
            wait_settle(&mut a, id);
            continue;
        }
        // B starts only now, so that A, not B, got the message first.
        let (mut b, _) = c.spawn(&format!("b{round}"), &lock, None);
        match wait_settle(&mut b, id) {
            Event::Settled { dc, .. } => assert!(dc >= 2, "B's delivery count {dc}"),
            other => panic!("B could not complete {id}: {other:?}"),
        }
        b.kill9_alive();
        a.signal(libc::SIGCONT);
        match wait_settle(&mut a, id) {
            Event::LockLost { .. } => lost += 1,
            other => panic!("A's late completion of {id}: {other:?} (expected LockLost)"),
        }
    }
    assert_eq!(
        lost, rounds,
        "rounds where A lost its lock ({skipped} skipped)"
    );
    a.kill9_alive();
    drop(q);
    store.close().unwrap();
    let report = c.verdict(
        "stopped holder",
        &format!("{rounds} stops past the lock, {skipped} skipped, {rounds} kills"),
    );
    assert!(report.lock_lost >= rounds as usize);
}

/// Reads a worker's events until its settle of `id` answered; returns that answer.
#[cfg(unix)]
fn wait_settle(p: &mut Proc, id: u64) -> Event {
    loop {
        let e = next_event(p);
        match &e {
            Event::Settled { id: s, .. }
            | Event::LockLost { id: s, .. }
            | Event::Failed { id: s, .. }
                if *s == id =>
            {
                return e;
            }
            _ => {}
        }
    }
}
