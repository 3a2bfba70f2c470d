//! A full disk: every call tells the truth about what it stored, and the store recovers by
//! itself once space is free (invariant 9; `docs/design.md` § "I/O failures").
//!
//! Runs on a small tmpfs mounted for the test, so it needs root (CI runs as root) and Linux;
//! elsewhere it says SKIP and passes. `POSTBOX_DISK_FULL_STEPS` sets how many free-space
//! amounts are tried (default 12, spread over the range where the batch stops fitting).

// Unix only: it fills a tmpfs mounted for the test (Linux, as root; SKIP on other Unix systems).
#![cfg(unix)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use postbox::{Error, ErrorKind, Message, Store};

#[path = "common/tmpfs.rs"]
mod tmpfs;
use tmpfs::Tmpfs;

/// Fills the file system with `filler`, then gives back `free` bytes.
fn fill_leaving(dir: &Path, free: u64) -> PathBuf {
    let filler = dir.join("filler");
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&filler)
        .unwrap();
    let chunk = vec![0xAAu8; 4096];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    let len = f.metadata().unwrap().len();
    f.set_len(len.saturating_sub(free)).unwrap();
    f.sync_all().unwrap();
    filler
}

fn big_count(q: &postbox::Queue, big: usize) -> usize {
    q.browse()
        .map(|e| e.unwrap())
        .filter(|e| e.body().len() == big)
        .count()
}

/// The count of `big` messages, or `None` when the read itself found the disk full.
fn big_count_or_full(q: &postbox::Queue, big: usize) -> Option<usize> {
    let mut n = 0;
    for e in q.browse() {
        match e {
            Ok(e) => n += usize::from(e.body().len() == big),
            Err(e) if e.kind() == ErrorKind::StorageFull => return None,
            Err(e) => panic!("a read during a full disk: {e}"),
        }
    }
    Some(n)
}

/// What a call that failed or succeeded may leave behind: all of its messages or none.
fn check_truthful(what: &str, result: &Result<(), Error>, found: usize, all: usize) {
    match result {
        Ok(()) => assert_eq!(found, all, "{what}: Ok but {found} of {all} stored"),
        Err(e) if e.kind() == ErrorKind::OutcomeUnknown => {
            assert!(
                found == 0 || found == all,
                "{what}: {e}: {found} of {all} stored"
            )
        }
        Err(e) => {
            assert_eq!(
                e.kind(),
                ErrorKind::StorageFull,
                "{what}: a full disk must say StorageFull: {e}"
            );
            assert_eq!(found, 0, "{what}: {e} but {found} of {all} stored");
        }
    }
}

/// Direct durable commits: the store file grows with the batch.
#[test]
fn a_full_disk_is_reported_truthfully_and_the_store_recovers() {
    full_disk_sweep(false, 50_000, 100 << 10, 700 << 10);
}

/// With the write-ahead log, a batch first needs room in the log (preallocated 1 MiB, grown
/// in steps of at least as much): the sweep crosses the point where the log cannot grow.
#[test]
fn a_full_disk_with_the_log_is_reported_truthfully_and_the_store_recovers() {
    full_disk_sweep(true, 400_000, 100 << 10, 5 << 20);
}

fn full_disk_sweep(log: bool, big: usize, from: u64, to: u64) {
    if !cfg!(target_os = "linux") {
        println!("SKIP: needs Linux tmpfs");
        return;
    }
    let steps: u64 = postbox_tests::env_u64("POSTBOX_DISK_FULL_STEPS", 12);
    let open = |path: &std::path::Path| Store::builder().write_ahead_log(log).open(path).unwrap();
    let big_count = |q: &postbox::Queue| big_count(q, big);
    let mut outcomes = Vec::new();
    for step in 0..steps {
        // From `from` free (nothing fits) to `to` (everything fits).
        let free = from + step * (to - from) / steps.max(1);
        let Some(fs) = Tmpfs::mount("16m") else {
            println!("SKIP: cannot mount a tmpfs here (not root?)");
            return;
        };
        let path = fs.path().join("s.postbox");
        let store = open(&path);
        let q = store.queue("q").unwrap();
        let out = store.queue("out").unwrap();
        q.send("seed").unwrap();
        let filler = fill_leaving(fs.path(), free);

        let batch = q.send_batch(vec![vec![b'B'; big]; 5]).map(drop);
        // While the disk is full a read may fail too: a failed write makes the store reopen
        // its files, which with a log means replaying it into the store file, and that needs
        // space (`docs/design.md` § I/O failures). What it reports is checked once space is
        // back, on the same handle.
        let batch_found_now = big_count_or_full(&q, big);

        let mut tx = store.begin();
        // Locking a message is a write too: with no space left it fails, truthfully.
        match tx.receive(&q, std::time::Duration::ZERO) {
            Ok(taken) => assert!(taken.is_some()),
            Err(e) => assert_eq!(e.kind(), ErrorKind::StorageFull, "{e}"),
        }
        for _ in 0..4 {
            tx.send(&out, vec![b'B'; big]).unwrap();
        }
        let commit = tx.commit();
        let tx_found_now = big_count_or_full(&out, big);
        if !log {
            // Without a log, reads keep working while the disk is full.
            q.stats().unwrap();
            store.queues().unwrap();
        }

        // Space comes back: the same handle works again, without reopening.
        std::fs::remove_file(&filler).unwrap();
        let batch_found = big_count(&q);
        let tx_found = big_count(&out);
        check_truthful("send_batch", &batch, batch_found, 5);
        check_truthful("tx.commit", &commit, tx_found, 4);
        for (now, later) in [(batch_found_now, batch_found), (tx_found_now, tx_found)] {
            if let Some(now) = now {
                assert_eq!(now, later, "what a read saw during the full disk stays");
            }
        }
        q.send(Message::new("after")).unwrap();
        assert_eq!(big_count(&q), batch_found);
        store.close().unwrap();

        // What the calls reported is what a reopen finds.
        let store = open(&path);
        let q = store.queue("q").unwrap();
        let out = store.queue("out").unwrap();
        assert_eq!(big_count(&q), batch_found, "after reopen");
        assert_eq!(big_count(&out), tx_found, "after reopen");
        store.close().unwrap();
        outcomes.push((
            free / 1024,
            batch.map_err(|e| e.kind()),
            commit.map_err(|e| e.kind()),
        ));
        drop(File::open(fs.path()));
    }
    println!("free KiB → (send_batch, commit): {outcomes:?}");
    // The sweep crosses the point where the batch stops fitting.
    assert!(outcomes.iter().any(|o| o.1.is_ok()), "{outcomes:?}");
    assert!(outcomes.iter().any(|o| o.1.is_err()), "{outcomes:?}");
}

/// Fills a small disk with live messages through the log until a send fails, then frees a
/// tenth of the disk: the next operations, a close and a reopen succeed on the same handle,
/// and every acknowledged message is there (the log grows in bounded steps, gives back a
/// failed growth and checkpoints instead of growing when space is short).
#[test]
fn a_store_that_filled_its_disk_works_again_once_a_tenth_is_freed() {
    if !cfg!(target_os = "linux") {
        println!("SKIP: needs Linux tmpfs");
        return;
    }
    const DISK: u64 = 8 << 20;
    for (body, per_send) in [(1024usize, 1usize), (1024, 16), (16 << 10, 1)] {
        let Some(fs) = Tmpfs::mount("8m") else {
            println!("SKIP: cannot mount a tmpfs here (not root?)");
            return;
        };
        // A tenth of the disk, handed back once the store has filled the rest.
        let reserve = fs.path().join("reserve");
        std::fs::write(&reserve, vec![0x55u8; (DISK / 10) as usize]).unwrap();
        let path = fs.path().join("s.postbox");
        let store = Store::open(&path).unwrap();
        let q = store.queue("q").unwrap();
        let mut acked = 0usize;
        let full = loop {
            let batch: Vec<Message> = (0..per_send)
                .map(|i| Message::new(vec![(acked + i) as u8; body]))
                .collect();
            match q.send_batch(batch) {
                Ok(_) => acked += per_send,
                Err(e) => break e,
            }
            assert!(acked < 100_000, "the disk never filled");
        };
        assert_eq!(full.kind(), ErrorKind::StorageFull, "{full}");
        let log_len = std::fs::metadata(log_of(&path)).map_or(0, |m| m.len());
        std::fs::remove_file(&reserve).unwrap();
        // The same handle goes on: sends, receives and completions.
        for i in 0..20 {
            q.send(Message::new(format!("after {i}"))).unwrap_or_else(|e| {
                panic!(
                    "send {i} after freeing a tenth ({body} B × {per_send}, {acked} acked, {}): {e}",
                    df(fs.path(), &path)
                )
            });
        }
        for _ in 0..20 {
            let m = q.try_receive().unwrap().expect("a message");
            m.complete().unwrap();
        }
        let expect = acked + 20 - 20;
        assert_eq!(q.stats().unwrap().active as usize, expect);
        store.close().unwrap_or_else(|e| {
            panic!(
                "close ({body} B × {per_send}, {acked} acked, log {log_len} B, {}): {e}",
                df(fs.path(), &path)
            )
        });
        let store = Store::open(&path).unwrap();
        let q = store.queue("q").unwrap();
        assert_eq!(q.stats().unwrap().active as usize, expect, "after reopen");
        store.close().unwrap();
        println!(
            "{body} B × {per_send}: {acked} acked before the disk filled; log was {log_len} B"
        );
    }
}

fn log_of(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push("-log");
    PathBuf::from(name)
}

/// The files' sizes and the disk's use, for failure messages.
fn df(dir: &Path, path: &Path) -> String {
    let used = std::process::Command::new("du")
        .arg("-sk")
        .arg(dir)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    format!(
        "store file {} B, log {} B, du {used:?}",
        std::fs::metadata(path).map_or(0, |m| m.len()),
        std::fs::metadata(log_of(path)).map_or(0, |m| m.len()),
    )
}
