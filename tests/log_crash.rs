//! Crash loop through the write-ahead log: a single-process child sending, completing and
//! moving messages in transactions is killed with SIGKILL at a random moment, again and again
//! (`POSTBOX_LOG_CRASH_ITERATIONS`, default 12 × `POSTBOX_STRESS`). Half the children
//! checkpoint every 64 KiB of log, so kills land in checkpoints too; after some kills the next
//! child opens the store straight away, so a replay is followed by more work and another kill
//! before anyone checks; and after some kills, the next open is killed too, at a random moment
//! (often inside its replay). Whenever this process checks:
//!
//! - the store opens without error;
//! - every send that returned (the child printed `SENT`) is there with its body, unless a
//!   child received it (`GOT`): its completion may have landed before the kill cut off the
//!   acknowledgement;
//! - nothing whose completion returned (`DONE`) is there;
//! - the exact counts match what is found;
//! - a clean close removes the log, and a reopen replays nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use postbox::Store;
use postbox_tests::{Proc, Rng, arg, env_u64, num, stress};

const CHILD: &str = env!("CARGO_BIN_EXE_pbx-child");

/// What the children reported: acknowledged sends (id → body), received messages (whose
/// completion may have landed unacknowledged) and acknowledged completions.
#[derive(Default)]
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
}

fn log_file(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-log");
    name.into()
}

/// How the checker opens a store after a crash: each must replay the log.
#[derive(Debug, Clone, Copy)]
enum Reopen {
    Default,
    MultiProcess,
    WithoutLog,
}

/// Opens the store (as `how` says) and checks it against what was acknowledged; returns the
/// records the open replayed.
fn check(path: &Path, acked: &Acked, it: u64, how: Reopen) -> u64 {
    let store = Store::builder()
        .multi_process(matches!(how, Reopen::MultiProcess))
        .write_ahead_log(!matches!(how, Reopen::WithoutLog))
        .open(path)
        .unwrap_or_else(|e| panic!("iteration {it}: reopen ({how:?}) failed: {e}"));
    let replayed = store.stats().replayed_records;
    let q = store.queue("logged").unwrap();
    let mut present = BTreeMap::new();
    for m in q.browse() {
        let m = m.unwrap();
        let body = String::from_utf8(m.body().to_vec()).unwrap();
        assert!(
            present.insert(m.id().get(), body).is_none(),
            "iteration {it}: message {} listed twice",
            m.id()
        );
    }
    for (id, body) in &acked.sent {
        if acked.done.contains(id) {
            assert!(
                !present.contains_key(id),
                "iteration {it}: completed message {id} came back"
            );
        } else if let Some(found) = present.get(id) {
            assert_eq!(found, body, "iteration {it}: message {id} changed");
        } else {
            // Only a completion the kill cut off before it was acknowledged takes a message.
            assert!(
                acked.got.contains(id),
                "iteration {it}: acknowledged send {id} lost"
            );
        }
    }
    let s = q.stats().unwrap();
    assert_eq!(
        s.active + s.locked + s.scheduled,
        present.len() as u64,
        "iteration {it}: counts {s:?}"
    );
    assert_eq!(s.dead_lettered, 0, "iteration {it}");
    drop(q);
    store.close().unwrap();
    assert!(
        !log_file(path).exists(),
        "iteration {it}: a clean close left the log behind"
    );
    let again = Store::open(path).unwrap();
    assert_eq!(again.stats().replayed_records, 0, "iteration {it}");
    again.close().unwrap();
    replayed
}

#[test]
fn sigkill_while_writing_through_the_log() {
    let iterations = env_u64("POSTBOX_LOG_CRASH_ITERATIONS", 12 * stress()).max(1);
    let mut rng = Rng::from_env("log_crash");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("logged.postbox");
    let mut acked = Acked::default();
    let (mut replayed, mut checks, mut opens_killed) = (0, 0, 0);
    for it in 0..iterations {
        let checkpoint_bytes = if rng.below(2) == 0 {
            64 << 10
        } else {
            32 << 20
        };
        let mut child = Proc::spawn(
            CHILD,
            &format!("logged-{it}"),
            &[
                "logged",
                arg(&path),
                "logged",
                &format!("i{it}"),
                &checkpoint_bytes.to_string(),
            ],
        );
        child.expect("READY");
        // Kill at a random moment: after a random number of acknowledged calls, plus up to
        // 3 ms so the kill lands anywhere in the next commit (or checkpoint).
        let calls = 1 + rng.below(300);
        let mut seen = 0;
        while seen < calls {
            let line = child
                .next_line()
                .unwrap_or_else(|| panic!("iteration {it}: the child stopped: {:?}", child.log));
            acked.take(&line);
            seen += 1;
        }
        std::thread::sleep(Duration::from_micros(rng.below(3000)));
        for line in child.kill9() {
            acked.take(&line);
        }
        assert!(
            log_file(&path).exists(),
            "iteration {it}: no log after a crash"
        );
        // Sometimes the next open is killed too, at a random moment (often inside the replay
        // of what the first kill left).
        for k in 0..rng.below(3) {
            let mut opener = Proc::spawn(
                CHILD,
                &format!("open-{it}-{k}"),
                &["open-only", arg(&path), "logged"],
            );
            std::thread::sleep(Duration::from_micros(rng.below(4000)));
            let lines = opener.kill9();
            for line in &lines {
                acked.take(line);
            }
            opens_killed += u64::from(!lines.iter().any(|l| l == "OPENED"));
        }
        // Every third kill goes unchecked: the next child replays and works on.
        if rng.below(3) != 0 || it + 1 == iterations {
            let how =
                [Reopen::Default, Reopen::MultiProcess, Reopen::WithoutLog][rng.below(3) as usize];
            replayed += check(&path, &acked, it, how);
            checks += 1;
        }
    }
    println!(
        "{iterations} kills, {checks} checks, {opens_killed} opens killed before they returned, \
         {} sends and {} completions acknowledged, {replayed} log records replayed",
        acked.sent.len(),
        acked.done.len()
    );
    assert!(replayed > 0, "no kill left anything to replay");
}

/// A store opened through a symbolic link keeps its log beside the file the link points to:
/// killed while writing through one link, the store replays through the real path and through
/// another link alike. Unix only: on Windows a symbolic link needs Developer Mode or an
/// administrator, and Wine 8's `CreateSymbolicLinkW` reports success and creates nothing.
#[cfg(unix)]
#[test]
fn the_log_follows_the_file_not_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.postbox");
    Store::open(&real).unwrap().close().unwrap();
    let (link, other) = (dir.path().join("link-a"), dir.path().join("link-b"));
    std::os::unix::fs::symlink(&real, &link).unwrap();
    std::os::unix::fs::symlink(&real, &other).unwrap();

    let mut acked = Acked::default();
    let mut child = Proc::spawn(
        CHILD,
        "logged-via-link",
        &[
            "logged",
            arg(&link),
            "logged",
            "link",
            &(32u64 << 20).to_string(),
        ],
    );
    child.expect("READY");
    for _ in 0..50 {
        let line = child.next_line().expect("the child stopped");
        acked.take(&line);
    }
    for line in child.kill9() {
        acked.take(&line);
    }
    assert!(log_file(&real).exists(), "the log is beside the real file");
    assert!(!log_file(&link).exists(), "no log beside the link");

    // Through another link: the replay finds the log and every acknowledged send.
    let replayed = check(&other, &acked, 0, Reopen::Default);
    assert!(replayed > 0, "nothing was replayed");
    assert!(!log_file(&real).exists());
}

/// Creates the store at `path` with `queue`, has a child send `n` rich messages and a batch
/// of three to it and abort (no clean close: everything since the open is in the log only),
/// and returns the ids the child saw acknowledged.
fn sends_then_abort(path: &Path, queue: &str, n: u32) -> Vec<u64> {
    {
        let s = Store::open(path).unwrap();
        s.queue(queue).unwrap();
        s.close().unwrap();
    }
    let count = n.to_string();
    let mut child = Proc::spawn(
        CHILD,
        "send-rich-abort",
        &["send-rich-abort", arg(path), queue, &count],
    );
    let mut ids = Vec::new();
    while let Some(line) = child.next_line() {
        if let Some(id) = line.strip_prefix("SENT ") {
            ids.push(num(id));
        }
    }
    assert!(!child.wait().success(), "the child must abort, not close");
    ids
}

/// Sends through the log are logged as the operation (a logical record) and replayed by
/// running it again: killed with every send acknowledged and none checkpointed, the store
/// gives back each message with the id it was acknowledged with and every property it was
/// sent with — times included, since replay runs at the record's time.
#[test]
fn replayed_sends_keep_their_ids_and_every_property() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rich.postbox");
    let ids = sends_then_abort(&path, "rich", 20);
    assert_eq!(ids.len(), 23, "every send acknowledged");
    assert!(log_file(&path).exists(), "no log after the abort");
    let store = Store::open(&path).unwrap();
    assert!(
        store.stats().replayed_records > 0,
        "the sends must come back by replay"
    );
    let q = store.queue("rich").unwrap();
    for (i, id) in ids.iter().enumerate() {
        let i = i as u64;
        let env = q
            .get(postbox::MessageId(*id))
            .unwrap()
            .unwrap_or_else(|| panic!("message {id} (send {i}) lost"));
        let want = postbox_tests::rich_message(i);
        assert_eq!(env.body(), want.body());
        assert_eq!(env.label(), Some(format!("label-{i}").as_str()));
        assert_eq!(env.content_type(), Some("text/plain"));
        assert_eq!(env.correlation_id(), Some(format!("corr-{i}").as_str()));
        assert_eq!(env.reply_to(), Some("answers"));
        assert_eq!(env.group(), Some(format!("group-{}", i % 3).as_str()));
        assert_eq!(env.sequence(), Some(i));
        assert_eq!(env.priority(), (i % 8) as u8);
        let enq = env.enqueued_at();
        let vis = env.visible_at().expect("scheduled");
        let exp = env.expires_at().expect("expires");
        assert_eq!(
            vis.duration_since(enq).unwrap(),
            Duration::from_secs(3600 + i)
        );
        assert_eq!(
            exp.duration_since(enq).unwrap(),
            Duration::from_secs(7200 + i)
        );
        assert_eq!(
            env.property("n"),
            Some(&postbox::PropertyValue::from(format!("value-{i}")))
        );
    }
    assert_eq!(q.stats().unwrap().scheduled, 23);
    store.close().unwrap();
}

/// An open after a crash replays the log without a durable commit of the store file, so the
/// log stays the authority until the first write, which checkpoints: a crash before that
/// write replays the same records again (and nothing is lost), and after it nothing is
/// replayed twice.
#[test]
fn an_open_after_a_crash_keeps_the_log_until_the_first_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kept.postbox");
    let ids = sends_then_abort(&path, "kept", 40);
    let replayed_by = |tag: &str| {
        let mut child = Proc::spawn(CHILD, tag, &["open-abort", arg(&path), "kept"]);
        let line = child.next_line().expect("the child opened the store");
        assert!(!child.wait().success(), "the child must abort, not close");
        num(line.strip_prefix("REPLAYED ").expect("REPLAYED n"))
    };
    let first = replayed_by("open-abort-1");
    // 40 sends and one batch of three: a record each.
    assert!(first >= 41, "every send replayed: {first}");
    // The first open's replay was not made durable, and its own commit went to the log.
    let second = replayed_by("open-abort-2");
    assert_eq!(
        second,
        first + 1,
        "the second open replays the same records"
    );
    let store = Store::open(&path).unwrap();
    assert_eq!(store.stats().replayed_records, first + 2);
    assert_eq!(
        store.stats().checkpoints,
        0,
        "the open itself does not checkpoint"
    );
    let q = store.queue("kept").unwrap();
    q.send("after").unwrap();
    assert_eq!(store.stats().checkpoints, 1, "the first write checkpoints");
    for id in &ids {
        assert!(
            q.get(postbox::MessageId(*id)).unwrap().is_some(),
            "{id} lost"
        );
    }
    drop(q);
    store.close().unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.stats().replayed_records, 0);
    let q = store.queue("kept").unwrap();
    assert_eq!(q.stats().unwrap().scheduled, ids.len() as u64);
    assert_eq!(q.len().unwrap(), 1, "the message sent after the replay");
    drop(q);
    store.close().unwrap();
}

/// The consume loop (`complete_batch_and_receive`, one commit a message) is logged as one
/// operation — complete, then receive the next — and replayed by running it again: aborted
/// mid-loop, the store holds exactly the messages not completed (the one held at the abort is
/// receivable again), with and without a receipt queue. A receipt takes a new message id,
/// which replay could not draw the same way, so those batches are logged with their rows
/// after all: every completion's receipt is there once, under an id of its own.
#[test]
fn replayed_consume_loops_complete_exactly_what_was_acknowledged() {
    for receipts in ["0", "1"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("consume.postbox");
        let mut child = Proc::spawn(
            CHILD,
            "consume-abort",
            &["consume-abort", arg(&path), "work", "40", "25", receipts],
        );
        let (mut sent, mut done, mut held) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        while let Some(line) = child.next_line() {
            let (word, id) = line.split_once(' ').unwrap_or((line.as_str(), ""));
            match word {
                "SENT" => sent.insert(num(id)),
                "DONE" => done.insert(num(id)),
                "HELD" => held.insert(num(id)),
                _ => false,
            };
        }
        assert!(!child.wait().success(), "the child must abort, not close");
        assert_eq!((sent.len(), done.len(), held.len()), (40, 25, 1));
        let store = Store::open(&path).unwrap();
        assert!(store.stats().replayed_records > 0, "nothing was replayed");
        if receipts == "1" {
            // Before the rest is completed below, which posts receipts of its own.
            let audit = store.queue("audit").unwrap();
            let mut ids = BTreeSet::new();
            while let Some(r) = audit.try_receive().unwrap() {
                assert!(!sent.contains(&r.id().0), "a receipt took a message's id");
                ids.insert(r.id().0);
                r.complete().unwrap();
            }
            assert_eq!(ids.len(), done.len(), "one receipt per completion");
        }
        let q = store.queue("work").unwrap();
        let mut left = BTreeSet::new();
        while let Some(m) = q.try_receive().unwrap() {
            left.insert(m.id().0);
            m.complete().unwrap();
        }
        let expected: BTreeSet<u64> = sent.difference(&done).copied().collect();
        assert_eq!(left, expected, "receipts {receipts}: not completed = left");
        assert!(held.is_subset(&left));
        store.close().unwrap();
    }
}
