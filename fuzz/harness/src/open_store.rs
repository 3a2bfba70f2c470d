//! Target `open_store`: opening damaged files as a store. Every outcome must be a typed error or
//! a working store (which then takes a few operations and closes); never a panic, a hang or a
//! huge allocation (libFuzzer's -timeout and -rss_limit_mb catch those two).
//!
//! The first byte picks what the input becomes:
//! - the whole store file (redb must refuse it or make sense of it);
//! - patches to a clean store (so damage lands inside a file redb otherwise accepts);
//! - the `-log` beside a crash image of a store (raw bytes, patches to the real log, or
//!   well-framed records whose bodies are arbitrary row changes that recovery must replay or
//!   refuse).

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use postbox::{Message, QueueOptions, Store};

const MAX_INPUT: usize = 256 * 1024;
const MAX_PATCHES: usize = 32;

struct Templates {
    /// A cleanly closed store.
    clean: Vec<u8>,
    /// The store file and the log of a store that was never closed (as after `kill -9`).
    crashed: Vec<u8>,
    /// Its log without the preallocated zeros (so that patches land on records), the log's
    /// length (a shorter log is refused as cut), and the store and cycle its header names.
    crashed_log: Vec<u8>,
    log_len: usize,
    ids: (u64, u64),
}

fn templates() -> &'static Templates {
    static T: OnceLock<Templates> = OnceLock::new();
    T.get_or_init(|| {
        let dir = crate::tempdir();
        let path = dir.path().join("t.postbox");
        let store = Store::open(&path).expect("template store");
        fill(&store);
        // Copied while open: the log holds the batches redb has not made durable yet.
        let crashed = std::fs::read(&path).expect("read store");
        let log = std::fs::read(log_path(&path)).expect("read log");
        store.close().expect("close template");
        let clean = std::fs::read(&path).expect("read store");
        let ids = postbox::fuzzing::log_ids(&log).expect("the template log has a header");
        Templates {
            clean,
            crashed,
            log_len: log.len(),
            crashed_log: trim_zeros(log),
            ids,
        }
    })
}

fn fill(store: &Store) {
    let q = store
        .queue_with(
            "orders",
            QueueOptions::default()
                .max_deliveries(2)
                .dedup_window(Duration::from_secs(60)),
        )
        .expect("queue");
    for i in 0..6u8 {
        q.send(
            Message::new(vec![i; usize::from(i) * 7])
                .label("l")
                .priority(i % 8)
                .property("k", "v")
                .message_key(format!("key{i}")),
        )
        .expect("send");
    }
    let r = q.try_receive().expect("receive").expect("a message");
    r.abandon().expect("abandon");
    let r = q.try_receive().expect("receive").expect("a message");
    r.dead_letter("Reason", "description").expect("dead-letter");
    let r = q.try_receive().expect("receive").expect("a message");
    r.defer().expect("defer");
    let _held = q.try_receive().expect("receive");
    let other = store.queue("other").expect("queue");
    other.send("x").expect("send");
    store
        .table("app")
        .expect("table")
        .put(b"k", b"v")
        .expect("put");
}

fn log_path(store: &Path) -> std::path::PathBuf {
    let mut p = store.as_os_str().to_owned();
    p.push("-log");
    p.into()
}

/// Drops the log's preallocated zeros (they only end it) so patches land on records.
fn trim_zeros(mut log: Vec<u8>) -> Vec<u8> {
    let used = log.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    log.truncate(used.next_multiple_of(8) + 64);
    log
}

/// Applies patches `kind, offset (4 bytes), xor` to `file`: damage near the start (redb's header
/// and the first pages) or anywhere.
fn patch(file: &mut [u8], patches: &[u8]) {
    if file.is_empty() {
        return;
    }
    for p in patches.chunks_exact(6).take(MAX_PATCHES) {
        let off = u32::from_le_bytes([p[1], p[2], p[3], p[4]]) as usize;
        let at = if p[0] & 1 == 0 {
            off % file.len().min(8192)
        } else {
            off % file.len()
        };
        file[at] ^= p[5].max(1);
    }
}

pub fn run(data: &[u8]) {
    let Some((pick, rest)) = crate::split_first(data) else {
        return;
    };
    if rest.len() > MAX_INPUT {
        return;
    }
    let t = templates();
    let (store, log) = match pick % 5 {
        0 => (rest.to_vec(), None),
        1 => {
            let mut s = t.clean.clone();
            patch(&mut s, rest);
            (s, None)
        }
        2 => (t.crashed.clone(), Some(rest.to_vec())),
        3 => {
            let mut l = t.crashed_log.clone();
            patch(&mut l, rest);
            // Back to its length, unless the patch bytes ask for a cut one.
            if rest.first().is_none_or(|b| b & 0x40 == 0) {
                l.resize(l.len().max(t.log_len), 0);
            }
            (t.crashed.clone(), Some(l))
        }
        _ => {
            // Records of this store's cycle (or, by the first byte, of another store).
            let store = if rest.first().is_some_and(|b| b & 0x40 != 0) {
                t.ids.0 ^ 1
            } else {
                t.ids.0
            };
            let mut l = crate::records::log_of_records(store, t.ids.1, rest);
            l.resize(l.len().max(t.log_len), 0);
            (t.crashed.clone(), Some(l))
        }
    };
    open_and_use(&store, log.as_deref(), pick & 0x80 != 0, pick & 0x40 != 0);
}

fn open_and_use(store: &[u8], log: Option<&[u8]>, verify: bool, accept_loss: bool) {
    let dir = crate::tempdir();
    let path = dir.path().join("s.postbox");
    std::fs::write(&path, store).expect("write store");
    if let Some(log) = log {
        std::fs::write(log_path(&path), log).expect("write log");
    }
    let opened = Store::builder()
        .verify_on_open(verify)
        .accept_log_loss(accept_loss)
        .open(&path);
    let Ok(store) = opened else {
        return;
    };
    exercise(&store);
    let _ = store.close();
    // What a working store left behind opens again (or is refused), like any file.
    if let Ok(again) = Store::open(&path) {
        exercise(&again);
        let _ = again.close();
    }
}

fn exercise(store: &Store) {
    let _ = store.stats();
    let _ = store.queue_infos();
    let _ = store.topics();
    let names = store.queues().unwrap_or_default();
    // Ids of messages seen in the store and not removed since: no send may be given one.
    let mut stored = std::collections::BTreeSet::new();
    for name in names.iter().take(4) {
        let Ok(q) = store.open_queue(name) else {
            continue;
        };
        let _ = q.stats();
        let _ = q.options();
        let _ = q.peek();
        for e in q.browse().take(8) {
            match e {
                Ok(e) => stored.insert(e.id()),
                Err(_) => break,
            };
        }
        if let Ok(Some(r)) = q.try_receive() {
            stored.insert(r.id());
            let _ = r.abandon();
        }
        if let Ok(Some(r)) = q.try_receive() {
            let id = r.id();
            stored.insert(id);
            if r.complete().is_ok() {
                stored.remove(&id);
            }
        }
        if let Ok(sent) = q.send_checked(Message::new("fuzz").message_key("key1")) {
            // A duplicate key returns the earlier send's id, which is stored by design (the
            // store may hold a message sent with this key and body, and a dedup window).
            assert!(
                sent.duplicate || !stored.contains(&sent.id),
                "a send was given id {:?} of a stored message",
                sent.id
            );
            stored.insert(sent.id);
        }
    }
    if let Ok(table) = store.table("app") {
        let _ = table.get(b"k");
    }
    if let Ok(q) = store.queue("fresh") {
        let _ = q.send("x");
        if let Ok(Some(r)) = q.try_receive() {
            let _ = r.complete();
        }
    }
}
