//! Corruption sweep (invariant 9): copies of a real store damaged by random bit flips and
//! truncations are opened and drained. Each must end in data or a typed error — never a panic
//! escaping postbox's API, never a hang.
//!
//! Knobs: `POSTBOX_CORRUPTION_COPIES` (default 200), `POSTBOX_CORRUPTION_SEED` (default: from the
//! time; the seed is printed so that a failure can be replayed), `POSTBOX_CORRUPTION_ONLY=<copy>`
//! to replay one copy, `POSTBOX_CORRUPTION_VERBOSE=1` to print every outcome. The base store
//! differs from run to run, so a misbehaving copy is kept under the target directory
//! (`corruption-failures/`), and `POSTBOX_CORRUPTION_REPLAY=<that file>` runs it alone.

mod common;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use common::Rng;
use postbox::{Durability, Error, ErrorKind, JobOptions, Message, QueueOptions, Store};

/// Messages in the base store.
const MESSAGES: usize = 160;
/// A copy that takes longer than this to open and drain is reported as a hang.
const HANG: Duration = Duration::from_secs(120);

/// Builds the base store: several queues, some messages locked, scheduled, expiring and
/// dead-lettered. Returns (snapshot taken while messages were locked, snapshot after close).
fn build_base(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    let path = dir.join("base.postbox");
    let store = Store::open(&path).unwrap();
    // The receipt queue first: receipts_to names an existing queue.
    let audit = store
        .queue_with(
            "audit",
            QueueOptions::default().dedup_window(Duration::from_secs(3600)),
        )
        .unwrap();
    let orders = store
        .queue_with(
            "orders",
            QueueOptions::default()
                .max_deliveries(3)
                .receipts_to("audit"),
        )
        .unwrap();
    let billing = store.queue("billing/eu").unwrap();
    let queues = [&orders, &audit, &billing];
    let mut batch: Vec<Vec<Message>> = vec![Vec::new(), Vec::new(), Vec::new()];
    for i in 0..MESSAGES {
        // Bodies of varied sizes, a few spanning pages.
        let len = if i.is_multiple_of(25) {
            6000
        } else {
            [0, 10, 40, 100, 300][i % 5]
        };
        let mut m = Message::new(vec![(i % 251) as u8; len])
            .label(format!("m{i}"))
            .priority((i % 8) as u8)
            .property("n", i.to_string());
        if i.is_multiple_of(7) {
            m = m.message_key(format!("k{i}")).correlation_id("c");
        }
        if i.is_multiple_of(11) {
            m = m.delay(Duration::from_secs(3600 * 24));
        }
        if i.is_multiple_of(13) {
            m = m.ttl(Duration::from_secs(3600 * 24));
        }
        batch[i % 3].push(m);
    }
    for (q, msgs) in queues.iter().zip(batch) {
        q.send_batch(msgs).unwrap();
    }
    // Dead letters.
    for q in queues {
        for _ in 0..10 {
            q.try_receive()
                .unwrap()
                .unwrap()
                .dead_letter("Corruption", "base")
                .unwrap();
        }
    }
    // What issue 14 stores: a job with pending pieces and a continuation, application rows
    // (one of them naming the job), and progress keys on a message.
    let job = store
        .create_job(JobOptions::default().continuation(&billing, Message::new("stitch")))
        .unwrap();
    job.send_batch(&orders, (0..12).map(|i| Message::new(format!("piece {i}"))))
        .unwrap();
    job.seal().unwrap();
    let app = store.table("app").unwrap();
    app.put(b"job", &job.id().to_le_bytes()).unwrap();
    for i in 0..40u32 {
        app.put(&i.to_be_bytes(), &vec![i as u8; (i * 37 % 500) as usize])
            .unwrap();
    }
    let mut m = billing.try_receive().unwrap().unwrap();
    m.mark_done((0..30).map(|k| format!("key-{k}"))).unwrap();
    m.abandon().unwrap();
    drop((orders, audit, billing));
    store.close().unwrap();
    // Compact the file so that most random damage lands on live pages rather than on the free
    // space redb keeps around: damage there is what the sweep is about.
    {
        let mut db = redb::Database::open(&path).unwrap();
        db.compact().unwrap();
    }
    // Hold some locks and capture the file in that state (single-process opens release them).
    // Without the log, so that the locks are in the file itself: a store with a log needs its
    // log after a crash, and the copy would be refused without it.
    let store = Store::builder().write_ahead_log(false).open(&path).unwrap();
    let queues: Vec<_> = ["orders", "audit", "billing/eu"]
        .iter()
        .map(|n| store.queue(n).unwrap())
        .collect();
    let held: Vec<_> = queues
        .iter()
        .flat_map(|q| q.receive_batch(5, Duration::ZERO).unwrap())
        .collect();
    assert_eq!(held.len(), 15);
    let locked = std::fs::read(&path).unwrap();
    drop(held);
    drop(queues);
    store.close().unwrap();
    let closed = std::fs::read(&path).unwrap();
    eprintln!(
        "base store: {} bytes with locks held, {} bytes closed",
        locked.len(),
        closed.len()
    );
    (locked, closed)
}

#[derive(Debug, Clone, Copy)]
#[allow(dead_code)] // the fields are read through `Debug`, in the report
enum Damage {
    Flips(usize),
    PageFlips,
    Truncate(usize),
    Extend,
}

/// A random offset inside a page that holds something: pages redb never wrote are zeros, and
/// damage there is invisible, so most flips aim at written pages.
fn live_offset(bytes: &[u8], rng: &mut Rng) -> usize {
    let pages = bytes.len().div_ceil(4096);
    for _ in 0..64 {
        let page = rng.below(pages as u64) as usize * 4096;
        let end = (page + 4096).min(bytes.len());
        if bytes[page..end].iter().any(|b| *b != 0) {
            return page + rng.below((end - page) as u64) as usize;
        }
    }
    rng.below(bytes.len() as u64) as usize
}

fn damage(base: &[u8], rng: &mut Rng) -> (Vec<u8>, Damage) {
    let mut bytes = base.to_vec();
    let len = bytes.len() as u64;
    let kind = match rng.below(10) {
        0..=4 => {
            let n = 1 + rng.below(8) as usize;
            for _ in 0..n {
                let at = if rng.below(4) == 0 {
                    rng.below(len) as usize
                } else {
                    live_offset(base, rng)
                };
                bytes[at] ^= 1 << rng.below(8);
            }
            Damage::Flips(n)
        }
        5 | 6 => {
            // Many flips inside one written 4 KiB page.
            let page = live_offset(base, rng) / 4096 * 4096;
            let end = (page + 4096).min(bytes.len());
            for _ in 0..16 {
                let at = page + rng.below((end - page) as u64) as usize;
                bytes[at] ^= 1 << rng.below(8);
            }
            Damage::PageFlips
        }
        7 | 8 => {
            let at = rng.below(len) as usize;
            bytes.truncate(at);
            Damage::Truncate(at)
        }
        _ => {
            let mut tail = vec![0u8; 1 + rng.below(8192) as usize];
            rng.fill(&mut tail);
            bytes.extend_from_slice(&tail);
            Damage::Extend
        }
    };
    (bytes, kind)
}

/// How a copy ended.
#[derive(Debug)]
#[allow(dead_code)] // the fields are read through `Debug`, in the report
enum Outcome {
    /// Opened and drained: messages completed.
    Drained(usize),
    /// A typed error, at open or while draining.
    Failed(ErrorKind, String),
    /// A panic escaped the API.
    Panicked(String),
}

fn open_and_drain(path: &Path, verify: bool) -> Result<usize, Error> {
    let store = Store::builder()
        .durability(Durability::None)
        .verify_on_open(verify)
        .open(path)?;
    let mut drained = 0;
    let app = store.table("app")?;
    app.range(b"", None, 1000)?;
    if let Some(raw) = app.get(b"job")? {
        let id = u64::from_le_bytes(raw.try_into().unwrap_or_default());
        match store.job(id) {
            Ok(job) => {
                job.progress()?;
                job.pieces()?;
            }
            // Damage to redb's tree (unchecked without verify_on_open) can hide a row.
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    for name in store.queues()? {
        let q = store.queue(&name)?;
        for q in [q.clone(), q.dead_letters()?] {
            // Bounded: a damaged store must not make this loop forever. Completions go in
            // batches of 16 (one commit each), which keeps the debug-build sweep affordable.
            let mut held = Vec::new();
            for _ in 0..(MESSAGES * 2 + 20) {
                match q.try_receive()? {
                    Some(m) => {
                        m.done_keys()?;
                        held.push(m);
                    }
                    None => break,
                }
                if held.len() == 16 {
                    drained += held.len();
                    q.complete_batch(std::mem::take(&mut held))?;
                }
            }
            drained += held.len();
            q.complete_batch(held)?;
            q.stats()?;
        }
    }
    store.close()?;
    Ok(drained)
}

/// Saves the damaged bytes of a misbehaving copy for replay (the base store differs from run
/// to run, so the seed alone does not reproduce it; and the file itself may have been changed
/// by the open that misbehaved); returns where.
fn keep(path: &Path, damaged: &[u8]) -> String {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("corruption-failures");
    let _ = std::fs::create_dir_all(&dir);
    let to = dir.join(path.file_name().unwrap_or_default());
    match std::fs::write(&to, damaged) {
        Ok(_) => to.display().to_string(),
        Err(e) => format!("(not kept: {e})"),
    }
}

fn run_copy(path: &Path, verify: bool, damaged: &[u8]) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let owned = path.to_owned();
    std::thread::spawn(move || {
        let r = catch_unwind(AssertUnwindSafe(|| open_and_drain(&owned, verify)));
        let outcome = match r {
            Ok(Ok(n)) => Outcome::Drained(n),
            Ok(Err(e)) => Outcome::Failed(e.kind(), e.to_string()),
            Err(p) => Outcome::Panicked(
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default(),
            ),
        };
        let _ = tx.send(outcome);
    });
    match rx.recv_timeout(HANG) {
        Ok(o) => o,
        Err(_) => {
            let kept = keep(path, damaged);
            panic!(
                "{}: open-and-drain hung for {HANG:?}; copy kept at {kept}",
                path.display()
            )
        }
    }
}

/// Whether a copy's outcome is one the sweep accepts.
fn acceptable(outcome: &Outcome, verify: bool) -> bool {
    // With verify_on_open, damage is reported as such. Without it, postbox's record checksums
    // still catch damaged records, but damage to redb's own tree structure (its branch pages
    // and keys, which only the open-time check covers) can make a lookup miss or land
    // elsewhere: a queue or message not found, a lock hidden from its settle, a message
    // listed under the wrong queue (which this drain's complete_batch then refuses).
    match outcome {
        Outcome::Failed(ErrorKind::Corrupted | ErrorKind::NotAStore, _) => true,
        Outcome::Failed(
            ErrorKind::LockLost
            | ErrorKind::NotFound
            | ErrorKind::QueueNotFound
            | ErrorKind::InvalidArgument,
            _,
        ) => !verify,
        Outcome::Failed(..) | Outcome::Panicked(_) => false,
        Outcome::Drained(_) => true,
    }
}

/// `POSTBOX_CORRUPTION_REPLAY=<kept copy>`: opens and drains a copy the sweep kept (on a copy
/// of it, with and without `verify_on_open`) instead of running the sweep.
fn replay_kept(kept: &Path) {
    let dir = common::fast_tempdir();
    let bytes = std::fs::read(kept).unwrap();
    for verify in [false, true] {
        let path = dir.path().join(format!("replay-{verify}.postbox"));
        std::fs::write(&path, &bytes).unwrap();
        let outcome = run_copy(&path, verify, &bytes);
        eprintln!("{} (verify_on_open {verify}): {outcome:?}", kept.display());
        assert!(acceptable(&outcome, verify), "{outcome:?}");
    }
}

#[test]
fn damaged_copies_end_in_data_or_a_typed_error() {
    if let Some(kept) = std::env::var_os("POSTBOX_CORRUPTION_REPLAY") {
        return replay_kept(Path::new(&kept));
    }
    let copies = common::knob("POSTBOX_CORRUPTION_COPIES", 200);
    let seed = common::seed_from_env("POSTBOX_CORRUPTION_SEED");
    eprintln!("corruption sweep: {copies} copies, POSTBOX_CORRUPTION_SEED={seed}");
    let dir = common::fast_tempdir();
    let (locked, closed) = build_base(dir.path());

    // The undamaged snapshots open and drain completely.
    for (name, base) in [("locked", &locked), ("closed", &closed)] {
        let path = dir.path().join(format!("{name}.postbox"));
        std::fs::write(&path, base).unwrap();
        // All but the scheduled ones, plus the job's 12 pieces and the receipts of the 10
        // messages dead-lettered from "orders".
        let expected = (0..MESSAGES).filter(|i| i % 11 != 0).count() + 12 + 10;
        match run_copy(&path, true, base) {
            Outcome::Drained(n) => assert_eq!(n, expected, "{name} snapshot"),
            other => panic!("undamaged {name} snapshot: {other:?}"),
        }
    }

    // Each copy's damage derives from the seed and its index alone, so a failing copy can be
    // replayed; two workers share the copies.
    let next = AtomicUsize::new(0);
    let bad = Mutex::new(Vec::new());
    let tally: Mutex<BTreeMap<String, usize>> = Mutex::default();
    let verbose = std::env::var_os("POSTBOX_CORRUPTION_VERBOSE").is_some();
    let only: Option<usize> = std::env::var("POSTBOX_CORRUPTION_ONLY")
        .ok()
        .and_then(|v| v.parse().ok());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= copies {
                        break;
                    }
                    if only.is_some_and(|o| o != i) {
                        continue;
                    }
                    let mut rng =
                        Rng::new(seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    let base = if i.is_multiple_of(2) {
                        &locked
                    } else {
                        &closed
                    };
                    let (bytes, how) = damage(base, &mut rng);
                    let verify = i % 4 < 2;
                    let path = dir.path().join(format!("copy-{i}.postbox"));
                    std::fs::write(&path, &bytes).unwrap();
                    let started = Instant::now();
                    let outcome = run_copy(&path, verify, &bytes);
                    let what = format!("copy {i} ({how:?}, verify_on_open {verify})");
                    if verbose {
                        eprintln!("{what} {:?}: {outcome:?}", started.elapsed());
                    }
                    let key = match &outcome {
                        Outcome::Drained(_) => "drained".to_string(),
                        Outcome::Failed(kind, _) => format!("{kind:?}"),
                        Outcome::Panicked(_) => "PANIC".to_string(),
                    };
                    *tally.lock().unwrap().entry(key).or_default() += 1;
                    let typed = acceptable(&outcome, verify);
                    match &outcome {
                        _ if !typed => {
                            let kept = keep(&path, &bytes);
                            bad.lock()
                                .unwrap()
                                .push(format!("{what}: {outcome:?}; copy kept at {kept}"));
                        }
                        _ => {}
                    }
                    std::fs::remove_file(&path).unwrap();
                }
            });
        }
    });
    let bad = bad.into_inner().unwrap();
    let tally = tally.into_inner().unwrap();
    eprintln!("outcomes: {tally:?}");
    assert!(
        bad.is_empty(),
        "POSTBOX_CORRUPTION_SEED={seed}: {} copies misbehaved:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
