//! A store handle belongs to the process that opened it (invariant 11): in a `fork()` child
//! every call fails with `Forked` and writes nothing, closing or dropping the handle neither
//! hangs nor touches the file, and the parent carries on as if nothing happened.

// Unix only: Windows has no fork(), so no handle can reach a child process there.
#![cfg(unix)]

use std::time::{Duration, Instant};

use postbox::{ErrorKind, Store};

/// Forks; the child runs `child` and exits with its return value as status (without running
/// the parent's atexit handlers or destructors). Returns the child's exit status, failing the
/// test if the child does not exit within a generous guard.
fn fork_and_wait(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only calls postbox (which is what is under test) and `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(99);
        // SAFETY: ends the child at once, as a forked child of a threaded process should.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            assert!(libc::WIFEXITED(status), "child died: {status}");
            return libc::WEXITSTATUS(status);
        }
        if Instant::now() > deadline {
            // SAFETY: kills our own hung child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child hung");
        }
        std::thread::sleep(Duration::from_millis(5)); // a failure guard, not an ordering wait
    }
}

/// A store open for several processes in a temporary directory (kept while the guard lives),
/// its path, and its queue "q".
fn shared_store() -> (tempfile::TempDir, std::path::PathBuf, Store, postbox::Queue) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let store = Store::builder().multi_process(true).open(&path).unwrap();
    let q = store.queue("q").unwrap();
    (dir, path, store, q)
}

fn forked_kind(r: postbox::Result<impl Sized>) -> bool {
    matches!(r.map(drop).map_err(|e| e.kind()), Err(ErrorKind::Forked))
}

#[test]
fn a_forked_child_cannot_write_through_the_parents_handles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let store = Store::open(&path).unwrap();
    let q = store.queue("q").unwrap();
    q.send("before").unwrap();
    q.send("held").unwrap();
    let held = q.try_receive().unwrap().unwrap();
    let mut tx = store.begin();
    let code = fork_and_wait(|| {
        let checks = [
            store.is_forked(),
            forked_kind(q.send("child")),
            forked_kind(q.try_receive()),
            forked_kind(q.peek()),
            forked_kind(q.stats()),
            forked_kind(store.queue("other")),
            forked_kind(store.try_begin()),
            forked_kind(tx.send(&q, "in tx")),
        ];
        if checks.iter().any(|ok| !ok) {
            eprintln!("child checks: {checks:?}");
            return 1;
        }
        // Settling, closing and dropping let go of the handles without touching the file.
        if held.complete().map_err(|e| e.kind()) != Err(ErrorKind::Forked) {
            return 2;
        }
        if store.clone().close().is_err() {
            return 3;
        }
        drop(q.clone());
        0
    });
    assert_eq!(code, 0, "child");
    // The parent is unaffected: its next id follows on, and its messages survive a reopen.
    let id = q.send("parent").unwrap();
    assert_eq!(id.get(), 3);
    tx.send(&q, "parent tx").unwrap();
    tx.commit().unwrap();
    drop(q);
    store.close().unwrap();
    let store = Store::open(&path).unwrap();
    let bodies: Vec<Vec<u8>> = store
        .queue("q")
        .unwrap()
        .browse()
        .map(|e| e.unwrap().body().to_vec())
        .collect();
    assert_eq!(
        bodies,
        vec![
            b"before".to_vec(),
            b"held".to_vec(),
            b"parent".to_vec(),
            b"parent tx".to_vec()
        ]
    );
}

#[test]
fn a_child_forked_while_a_parent_thread_commits_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::builder()
        .durability(postbox::Durability::None)
        .open(dir.path().join("s.postbox"))
        .unwrap();
    let q = store.queue("q").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let (q, stop) = (q.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                q.send("busy").unwrap();
                n += 1;
            }
            n
        })
    };
    for _ in 0..20 {
        let code = fork_and_wait(|| {
            let ok = forked_kind(q.send("child")) && store.clone().close().is_ok();
            drop(q.clone());
            if ok { 0 } else { 1 }
        });
        assert_eq!(code, 0);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = sender.join().unwrap();
    assert_eq!(q.stats().unwrap().active, sent);
}

#[test]
fn the_child_can_open_a_shared_store_itself() {
    let (_dir, path, _store, q) = shared_store();
    q.send("parent").unwrap();
    let code = fork_and_wait(|| {
        let Ok(own) = Store::builder().multi_process(true).open(&path) else {
            return 1;
        };
        let ok = own.queue("q").and_then(|q| q.send("child")).is_ok();
        if ok && own.close().is_ok() { 0 } else { 2 }
    });
    assert_eq!(code, 0);
    assert_eq!(q.stats().unwrap().active, 2);
}

#[test]
fn a_grandchild_cannot_use_the_childs_store() {
    // The fork guard's pid is cached and cleared in every fork child, not only the first:
    // the child's own store must refuse the child's child as the parent's refuses the child.
    let (_dir, path, store, q) = shared_store();
    q.send("parent").unwrap();
    let code = fork_and_wait(|| {
        if !store.is_forked() {
            return 1;
        }
        let Ok(own) = Store::builder().multi_process(true).open(&path) else {
            return 2;
        };
        let Ok(mine) = own.queue("q") else {
            return 3;
        };
        if mine.send("child").is_err() || own.is_forked() {
            return 4;
        }
        let grandchild = fork_and_wait(|| {
            let refused = own.is_forked() && forked_kind(mine.send("grandchild"));
            if refused { 0 } else { 5 }
        });
        if grandchild != 0 {
            return grandchild;
        }
        // The grandchild's refusal left the child's handle working.
        let ok = mine.send("child again").is_ok() && !own.is_forked();
        if ok && own.close().is_ok() { 0 } else { 6 }
    });
    assert_eq!(code, 0);
    assert!(!store.is_forked());
    assert_eq!(q.stats().unwrap().active, 3);
}

#[test]
fn a_child_is_told_how_to_open_a_store_the_parent_holds() {
    // The advice of the refusal must work in the child: "share that Store" would hand it the
    // parent's handle, which fails with `Forked` there.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let store = Store::open(&path).unwrap();
    store.queue("q").unwrap().send("parent").unwrap();
    let code = fork_and_wait(|| match Store::open(&path) {
        Ok(_) => 1,
        Err(e) if e.kind() != ErrorKind::AlreadyOpen => 2,
        Err(e) => {
            let text = e.to_string();
            let advises = text.contains("forked")
                && text.contains("Store::builder().multi_process(true)")
                && !text.contains("clone");
            if advises { 0 } else { 3 }
        }
    });
    assert_eq!(code, 0);
    // In the parent, a second open is this process's own: share the handle.
    let e = Store::open(&path).unwrap_err();
    assert!(e.to_string().contains("clone that Store"), "{e}");
}

#[test]
fn a_child_opens_a_shared_store_while_parent_threads_write() {
    let (_dir, path, _store, q) = shared_store();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let (q, stop) = (q.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = q.try_receive();
                }
            })
        })
        .collect();
    let rounds: usize = postbox_testkit::knob("POSTBOX_FORK_ROUNDS", 10);
    for _ in 0..rounds {
        let code = fork_and_wait(|| {
            let Ok(own) = Store::builder().multi_process(true).open(&path) else {
                return 1;
            };
            let ok = own.queue("q").and_then(|q| q.send("child")).is_ok();
            if ok && own.close().is_ok() { 0 } else { 2 }
        });
        assert_eq!(code, 0);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    // Every child's send is there (the parent's receivers may have worn some out to the
    // dead-letter queue meanwhile).
    let s = q.stats().unwrap();
    assert_eq!(
        s.active + s.locked + s.scheduled + s.dead_lettered,
        rounds as u64
    );
}

/// Issue 27 item 6: a processor inherited across `fork()` reports `forked` from `join` and
/// `shutdown` in the child — at once, even without a time limit, with the counters of the
/// fork — and stops nothing: the parent's processor runs on.
#[test]
fn a_forked_child_gets_the_processors_report_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::builder()
        .multi_process(true)
        .open(dir.path().join("s.postbox"))
        .unwrap();
    let q = store.queue("work").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let p = postbox::Processor::builder(&q)
        .workers(2)
        .start(move |_d| -> Result<(), String> {
            let _ = tx.send(());
            Ok(())
        })
        .unwrap();
    for _ in 0..3 {
        q.send("before the fork").unwrap();
    }
    for _ in 0..3 {
        rx.recv_timeout(Duration::from_secs(20)).unwrap();
    }
    // Each completion is counted once its commit returned: read until settled (a guard bound).
    let deadline = Instant::now() + Duration::from_secs(20);
    while (p.stats().processed, p.in_flight()) != (3, 0) {
        assert!(Instant::now() < deadline, "{:?}", p.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    let code = fork_and_wait(|| {
        let joined = p.join(Duration::MAX);
        let shut = p.shutdown(Duration::MAX);
        let ok = [joined, shut].iter().all(|r| {
            r.forked && !r.finished && r.still_running == 0 && r.processed == 3 && r.failed == 0
        });
        if ok { 0 } else { 1 }
    });
    assert_eq!(code, 0);
    assert!(!p.is_stopped(), "the child stopped nothing");
    q.send("after the fork").unwrap();
    rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let report = p.shutdown(Duration::from_secs(20));
    assert!(report.finished && !report.forked, "{report:?}");
    assert_eq!(report.processed, 4);
}
