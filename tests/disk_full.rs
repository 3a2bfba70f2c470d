//! A full disk: every call tells the truth about what it stored, and the store recovers by
//! itself once space is free (invariant 9; `docs/design.md` § "I/O failures").
//!
//! Runs on a small tmpfs mounted for the test, so it needs root (CI runs as root) and Linux;
//! elsewhere it says SKIP and passes. `POSTBOX_DISK_FULL_STEPS` sets how many free-space
//! amounts are tried (default 12, spread over the range where the batch stops fitting).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use postbox::{Error, ErrorKind, Message, Store};

/// A tmpfs mounted on a temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

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

const BIG: usize = 50_000;

fn big_count(q: &postbox::Queue) -> usize {
    q.browse()
        .map(|e| e.unwrap())
        .filter(|e| e.body().len() == BIG)
        .count()
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

#[test]
fn a_full_disk_is_reported_truthfully_and_the_store_recovers() {
    if !cfg!(target_os = "linux") {
        println!("SKIP: needs Linux tmpfs");
        return;
    }
    let steps: u64 = postbox_tests::env_u64("POSTBOX_DISK_FULL_STEPS", 12);
    let mut outcomes = Vec::new();
    for step in 0..steps {
        // From 100 KiB free (nothing fits) to about 700 KiB (everything fits).
        let free = 100 * 1024 + step * (600 * 1024) / steps.max(1);
        let Some(fs) = Tmpfs::mount("8m") else {
            println!("SKIP: cannot mount a tmpfs here (not root?)");
            return;
        };
        let path = fs.path().join("s.postbox");
        let store = Store::open(&path).unwrap();
        let q = store.queue("q").unwrap();
        let out = store.queue("out").unwrap();
        q.send("seed").unwrap();
        let filler = fill_leaving(fs.path(), free);

        let batch = q.send_batch(vec![vec![b'B'; BIG]; 5]).map(drop);
        let batch_found = big_count(&q);
        check_truthful("send_batch", &batch, batch_found, 5);

        let mut tx = store.begin();
        // Locking a message is a write too: with no space left it fails, truthfully.
        match tx.receive(&q, std::time::Duration::ZERO) {
            Ok(taken) => assert!(taken.is_some()),
            Err(e) => assert_eq!(e.kind(), ErrorKind::StorageFull, "{e}"),
        }
        for _ in 0..4 {
            tx.send(&out, vec![b'B'; BIG]).unwrap();
        }
        let commit = tx.commit();
        let tx_found = big_count(&out);
        check_truthful("tx.commit", &commit, tx_found, 4);
        // Reads keep working while the disk is full.
        q.stats().unwrap();
        store.queues().unwrap();

        // Space comes back: the same handle works again, without reopening.
        std::fs::remove_file(&filler).unwrap();
        q.send(Message::new("after")).unwrap();
        assert_eq!(big_count(&q), batch_found);
        store.close().unwrap();

        // What the calls reported is what a reopen finds.
        let store = Store::open(&path).unwrap();
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
