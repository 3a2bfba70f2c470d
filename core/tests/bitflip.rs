//! Record checksums (invariant 9): one bit flipped anywhere in a populated store, opened with
//! `verify_on_open(false)` so that redb's page checksums are not checked, is either reported as
//! `Corrupted` (at open or by the operation that reads the damaged record) or harmless — never a
//! message with a wrong byte, never a panic, never a hang.
//!
//! Each copy of the store gets one flip at a position drawn from a fixed seed (most aimed at
//! pages that hold data), and every message is then read back every way there is — peek,
//! browse, get, receive — and compared, field for field, with what the undamaged store holds.
//!
//! What each step may do:
//! - open: succeed, or fail with `Corrupted` or `NotAStore` (a flip in the format version
//!   fails its checksum);
//! - a message read: return the message exactly as stored, or nothing, or fail with
//!   `Corrupted`;
//! - finding a dead-letter queue by name: succeed, or fail with `Corrupted` or `NotFound` (a
//!   damaged name);
//! - settling (`complete`, a write into the damaged file): succeed, or fail with any typed error
//!   but a caught panic.
//!
//! The checksums cover the values of `DATA`, `QUEUES` and `STATE`, not redb's keys: a flipped key
//! bit can make a message or a queue unreachable (counted as "unreachable", not an error), or
//! disorder a page so that a later write misses its row (`complete` then reports `LockLost`). In
//! principle it could also pair a message id with a neighbour's record; the test would report
//! that as a violation (every body is unique), and 6,000 flips over three seeds did not find one.
//!
//! Knobs: `POSTBOX_FLIPS` (copies, default 150), `POSTBOX_FLIPS_SEED` (default fixed),
//! `POSTBOX_FLIPS_ONLY=<copy>` to replay one copy, `POSTBOX_FLIPS_VERBOSE=1` to print every
//! copy's outcome. A copy that misbehaves is kept under the target directory for inspection.

mod common;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, SystemTime};

use common::Rng;
use postbox::{
    DeadLetterInfo, Durability, Envelope, Error, ErrorKind, Message, MessageId, PropertyValue,
    Queue, QueueOptions, Store,
};

/// Messages in the base store.
const MESSAGES: usize = 48;
/// A copy that takes longer than this to check is reported as a hang.
const HANG: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);
/// The default seed: the sweep is the same on every run unless told otherwise.
const SEED: u64 = 0x00C0_FFEE_5EED;

/// Body `i`: sizes from empty to several KiB (spanning pages), contents unique to the message so
/// that one message's bytes can never pass for another's.
fn body_for(i: usize) -> Vec<u8> {
    let len = [0, 1, 33, 200, 1000, 3000, 6000, 9000][i % 8];
    let mut body = vec![0u8; len];
    Rng::new(i as u64 + 1).fill(&mut body);
    body
}

struct Base {
    /// The closed store file.
    bytes: Vec<u8>,
    /// Every message as the undamaged store returns it, by id.
    golden: BTreeMap<u64, Envelope>,
}

/// Builds the base store: two queues with messages of varied sizes and properties, some
/// scheduled, some with a time to live, some dead-lettered.
fn build_base(dir: &Path) -> Base {
    let path = dir.join("base.postbox");
    let store = Store::builder()
        .durability(Durability::None)
        .open(&path)
        .unwrap();
    let orders = store
        .queue_with("orders", QueueOptions::default().max_deliveries(3))
        .unwrap();
    let audit = store.queue("audit").unwrap();
    let mut sent = BTreeMap::new();
    for i in 0..MESSAGES {
        let mut m = Message::new(body_for(i))
            .label(format!("m{i}"))
            .priority((i % 8) as u8)
            .property("n", i.to_string())
            .property("raw", PropertyValue::Bytes(vec![i as u8; i % 5]));
        if i % 5 == 0 {
            m = m
                .correlation_id(format!("c{i}"))
                .content_type("application/x-test");
        }
        if i % 9 == 0 {
            m = m.delay(DAY);
        }
        if i % 7 == 0 {
            m = m.ttl(10 * DAY);
        }
        let q = if i % 2 == 0 { &orders } else { &audit };
        let id = q.send(m).unwrap();
        sent.insert(id.0, i);
    }
    for q in [&orders, &audit] {
        for _ in 0..4 {
            q.try_receive()
                .unwrap()
                .unwrap()
                .dead_letter("Poison", "dead-lettered by the base store")
                .unwrap();
        }
    }
    drop((orders, audit));
    store.close().unwrap();
    // Drop redb's free space, so that most flips land on live pages.
    redb::Database::open(&path).unwrap().compact().unwrap();

    // The reference: every message read back from the undamaged file.
    let store = Store::open(&path).unwrap();
    let mut golden = BTreeMap::new();
    for name in ["orders", "audit"] {
        let q = store.queue(name).unwrap();
        for q in [q.dead_letters().unwrap(), q] {
            for &id in sent.keys() {
                if let Some(e) = q.get(MessageId(id)).unwrap() {
                    golden.insert(id, e);
                }
            }
        }
    }
    store.close().unwrap();
    assert_eq!(golden.len(), MESSAGES, "every message is readable");
    for (id, e) in &golden {
        assert_eq!(e.body(), body_for(sent[id]), "message {id} as sent");
    }
    Base {
        bytes: std::fs::read(&path).unwrap(),
        golden,
    }
}

/// Everything about a message but its body that reading it must not change (all but the
/// delivery count).
fn facts(e: &Envelope) -> impl PartialEq + Debug {
    (
        (e.id(), e.queue().to_owned()),
        (
            e.label().map(str::to_owned),
            e.content_type().map(str::to_owned),
            e.correlation_id().map(str::to_owned),
            e.reply_to().map(str::to_owned),
            e.message_key().map(str::to_owned),
            e.group().map(str::to_owned),
            e.sequence(),
        ),
        (
            e.priority(),
            e.enqueued_at(),
            e.visible_at(),
            e.expires_at(),
        ),
        e.properties().clone(),
        e.dead_letter_info().map(
            |d: &DeadLetterInfo| -> (String, String, String, SystemTime) {
                (
                    d.reason.clone(),
                    d.description.clone(),
                    d.source_queue.clone(),
                    d.at,
                )
            },
        ),
    )
}

/// How `got` differs from `expected`, if it does.
fn difference(got: &Envelope, expected: &Envelope, deliveries: u32) -> Option<String> {
    let (a, b) = (got.body(), expected.body());
    if a != b {
        let at = a
            .iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len()));
        return Some(format!(
            "body differs at byte {at} (length {} instead of {})",
            a.len(),
            b.len()
        ));
    }
    if facts(got) != facts(expected) {
        return Some(format!(
            "properties differ:\n  got      {:?}\n  expected {:?}",
            facts(got),
            facts(expected)
        ));
    }
    let want = expected.delivery_count() + deliveries;
    (got.delivery_count() != want)
        .then(|| format!("delivery count {} instead of {want}", got.delivery_count()))
}

/// What one damaged copy did; `Err` is a violation of the contract.
#[derive(Default, Debug)]
struct Outcome {
    /// Operations that failed with `Corrupted`.
    corrupted: usize,
    /// Messages read back intact.
    intact: usize,
    /// `get` of a message that the damage made unreachable (returned `None`).
    missing: usize,
    /// Completions that failed with a typed error.
    settle_failed: usize,
}

struct Checker<'a> {
    golden: &'a BTreeMap<u64, Envelope>,
    outcome: Outcome,
}

impl Checker<'_> {
    /// A message read back: it must be exactly what was sent.
    fn message(&mut self, how: &str, e: &Envelope, deliveries: u32) -> Result<(), String> {
        let Some(g) = self.golden.get(&e.id().0) else {
            return Err(format!(
                "{how} returned message {} that was never sent",
                e.id()
            ));
        };
        if let Some(d) = difference(e, g, deliveries) {
            return Err(format!("{how} returned message {} wrong: {d}", e.id()));
        }
        self.outcome.intact += 1;
        Ok(())
    }

    /// A failed operation: only `Corrupted` is acceptable.
    fn error(&mut self, how: &str, e: &Error) -> Result<(), String> {
        if e.kind() == ErrorKind::Corrupted {
            self.outcome.corrupted += 1;
            Ok(())
        } else {
            Err(format!("{how} failed with {:?}: {e}", e.kind()))
        }
    }

    fn queue(&mut self, q: &Queue) -> Result<(), String> {
        let name = q.name().to_owned();
        match q.peek() {
            Ok(Some(e)) => self.message("peek", &e, 0)?,
            Ok(None) => {}
            Err(e) => self.error("peek", &e)?,
        }
        for item in q.browse().take(MESSAGES + 1) {
            match item {
                Ok(e) => self.message("browse", &e, 0)?,
                Err(e) => {
                    self.error("browse", &e)?;
                    break;
                }
            }
        }
        let mine: Vec<u64> = (self.golden.iter())
            .filter(|(_, e)| e.queue() == name)
            .map(|(id, _)| *id)
            .collect();
        for id in mine {
            match q.get(MessageId(id)) {
                Ok(Some(e)) => self.message("get", &e, 0)?,
                Ok(None) => self.outcome.missing += 1,
                Err(e) => self.error("get", &e)?,
            }
        }
        let mut held = Vec::new();
        for _ in 0..=MESSAGES {
            match q.try_receive() {
                Ok(Some(m)) => {
                    self.message("receive", &m, 1)?;
                    held.push(m);
                }
                Ok(None) => break,
                Err(e) => {
                    self.error("receive", &e)?;
                    break;
                }
            }
        }
        // Settling writes to the damaged store. A damaged key (which no value checksum covers)
        // can disorder a redb page so that the write misses the row it meant, which surfaces as
        // another typed error (`LockLost`): acceptable for a write, as long as it is typed.
        for m in held {
            if let Err(e) = m.complete() {
                if e.kind() == ErrorKind::Panic {
                    return Err(format!("complete panicked: {e}"));
                }
                self.outcome.settle_failed += 1;
            }
        }
        Ok(())
    }
}

/// Opens a damaged copy and reads every message back every way.
fn check_copy(path: &Path, golden: &BTreeMap<u64, Envelope>) -> Result<Outcome, String> {
    let store = match Store::builder()
        .durability(Durability::None)
        .verify_on_open(false)
        .open(path)
    {
        Ok(s) => s,
        // A flip in the format version no longer matches its checksum: damage, not a newer
        // format.
        Err(e) => {
            return match e.kind() {
                ErrorKind::Corrupted | ErrorKind::NotAStore => Ok(Outcome {
                    corrupted: 1,
                    ..Outcome::default()
                }),
                _ => Err(format!("open failed with {:?}: {e}", e.kind())),
            };
        }
    };
    let mut c = Checker {
        golden,
        outcome: Outcome::default(),
    };
    for name in ["orders", "audit"] {
        let q = match store.queue(name) {
            Ok(q) => q,
            Err(e) => {
                c.error("queue", &e)?;
                continue;
            }
        };
        match q.dead_letters() {
            Ok(dlq) => c.queue(&dlq)?,
            // A damaged name in the queue table's keys (which no value checksum covers) makes
            // the dead-letter queue unreachable by name: its messages are unreachable, not wrong.
            Err(e) if e.kind() == ErrorKind::NotFound => c.outcome.missing += 1,
            Err(e) => c.error("dead_letters", &e)?,
        }
        c.queue(&q)?;
    }
    if let Err(e) = store.close() {
        c.error("close", &e)?;
    }
    Ok(c.outcome)
}

/// A position to flip: three in four inside a page that holds something (pages redb never
/// wrote are zeros, and their damage is invisible), the rest anywhere.
fn flip_position(bytes: &[u8], rng: &mut Rng) -> usize {
    if rng.below(4) > 0 {
        let pages = bytes.len().div_ceil(4096);
        for _ in 0..64 {
            let page = rng.below(pages as u64) as usize * 4096;
            let end = (page + 4096).min(bytes.len());
            if bytes[page..end].iter().any(|b| *b != 0) {
                return page + rng.below((end - page) as u64) as usize;
            }
        }
    }
    rng.below(bytes.len() as u64) as usize
}

/// Saves the damaged copy of a misbehaving run (before the check wrote to it); returns where.
fn keep(path: &Path, bytes: &[u8]) -> String {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bitflip-failures");
    let to = dir.join(path.file_name().unwrap_or_default());
    match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&to, bytes)) {
        Ok(()) => to.display().to_string(),
        Err(e) => format!("(not kept: {e})"),
    }
}

/// Runs `check_copy` on a thread: a panic is a violation, and so is a copy that never finishes.
fn run_copy(path: &Path, golden: &Arc<BTreeMap<u64, Envelope>>) -> Result<Outcome, String> {
    let (tx, rx) = mpsc::channel();
    let (owned, golden) = (path.to_owned(), golden.clone());
    std::thread::spawn(move || {
        let r = catch_unwind(AssertUnwindSafe(|| check_copy(&owned, &golden)));
        let _ = tx.send(r.unwrap_or_else(|p| {
            Err(format!(
                "panicked: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ))
        }));
    });
    rx.recv_timeout(HANG)
        .unwrap_or_else(|_| Err(format!("hung for more than {HANG:?}")))
}

#[test]
fn one_flipped_bit_is_reported_or_harmless_without_verify_on_open() {
    let flips = common::knob("POSTBOX_FLIPS", 150);
    let seed = common::env_u64("POSTBOX_FLIPS_SEED", SEED);
    let verbose = std::env::var_os("POSTBOX_FLIPS_VERBOSE").is_some();
    let only: Option<usize> = std::env::var("POSTBOX_FLIPS_ONLY")
        .ok()
        .and_then(|v| v.parse().ok());
    let dir = common::fast_tempdir();
    let base = build_base(dir.path());
    let golden = Arc::new(base.golden);
    eprintln!(
        "bit-flip sweep: {flips} copies of a {} byte store, POSTBOX_FLIPS_SEED={seed}",
        base.bytes.len()
    );

    // The undamaged file reads back completely.
    let path = dir.path().join("undamaged.postbox");
    std::fs::write(&path, &base.bytes).unwrap();
    let clean = run_copy(&path, &golden).unwrap();
    assert_eq!((clean.corrupted, clean.missing), (0, 0), "{clean:?}");

    let next = AtomicUsize::new(0);
    let bad = Mutex::new(Vec::new());
    let tally: Mutex<BTreeMap<&str, usize>> = Mutex::default();
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= flips {
                        break;
                    }
                    if only.is_some_and(|o| o != i) {
                        continue;
                    }
                    let mut rng =
                        Rng::new(seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    let at = flip_position(&base.bytes, &mut rng);
                    let bit = rng.below(8);
                    let mut bytes = base.bytes.clone();
                    bytes[at] ^= 1 << bit;
                    let path = dir.path().join(format!("flip-{i}.postbox"));
                    std::fs::write(&path, &bytes).unwrap();
                    let outcome = run_copy(&path, &golden);
                    let what = format!("copy {i}: bit {bit} of byte {at}");
                    if verbose {
                        eprintln!("{what}: {outcome:?}");
                    }
                    let key = match &outcome {
                        Err(_) => "VIOLATION",
                        Ok(o) if o.corrupted > 0 => "reported as Corrupted",
                        Ok(o) if o.missing > 0 => "messages unreachable, no wrong byte",
                        Ok(_) => "no visible effect",
                    };
                    *tally.lock().unwrap().entry(key).or_default() += 1;
                    match outcome {
                        Err(e) => {
                            let kept = keep(&path, &bytes);
                            bad.lock()
                                .unwrap()
                                .push(format!("{what}: {e}; copy kept at {kept}"));
                        }
                        Ok(_) => {
                            let _ = std::fs::remove_file(&path);
                        }
                    }
                }
            });
        }
    });
    let tally = tally.into_inner().unwrap();
    eprintln!("outcomes: {tally:?}");
    let bad = bad.into_inner().unwrap();
    assert!(
        bad.is_empty(),
        "POSTBOX_FLIPS_SEED={seed}: {} of {flips} copies misbehaved:\n{}",
        bad.len(),
        bad.join("\n")
    );
    if flips >= 50 && only.is_none() {
        assert!(
            tally.get("reported as Corrupted").copied().unwrap_or(0) > 0,
            "no flip was detected: the sweep does not reach the records"
        );
    }
}
