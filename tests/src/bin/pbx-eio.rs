//! Injects an fsync failure (EIO) into a real commit, to check that the caller is told the
//! outcome is unknown — and that a retry with the same `message_key` is safe after a reopen.
//!
//! This binary defines `fdatasync` and `fsync` itself, so the static linker binds the standard
//! library's calls (and so redb's `File::sync_data`) to them instead of libc's; they fail with
//! EIO while `FAIL` is set and make the real system call otherwise. Linux only.
//!
//! Usage: `pbx-eio <store> <queue>`. Prints:
//!
//! ```text
//! SENT <id> before           a send before the failure returned Ok
//! FAILED <kind> <text>       the send during the failure returned this error
//! AFTER <ok|kind>            what the next send (disk healthy again) returned
//! CLOSE <ok|kind>            what closing returned
//! ```

#[cfg(target_os = "linux")]
mod inject {
    use std::sync::atomic::{AtomicBool, Ordering};

    pub static FAIL: AtomicBool = AtomicBool::new(false);

    fn sync(fd: libc::c_int, call: libc::c_long) -> libc::c_int {
        if FAIL.load(Ordering::SeqCst) {
            // SAFETY: __errno_location returns this thread's errno slot.
            unsafe { *libc::__errno_location() = libc::EIO };
            return -1;
        }
        // SAFETY: a plain system call on a descriptor the caller owns.
        unsafe { libc::syscall(call, fd) as libc::c_int }
    }

    /// Replaces libc's `fdatasync` for this binary.
    #[unsafe(no_mangle)]
    pub extern "C" fn fdatasync(fd: libc::c_int) -> libc::c_int {
        sync(fd, libc::SYS_fdatasync)
    }

    /// Replaces libc's `fsync` for this binary.
    #[unsafe(no_mangle)]
    pub extern "C" fn fsync(fd: libc::c_int) -> libc::c_int {
        sync(fd, libc::SYS_fsync)
    }
}

#[cfg(target_os = "linux")]
fn main() {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use postbox::{Message, QueueOptions, Store};

    let args: Vec<String> = std::env::args().skip(1).collect();
    let (path, name) = (&args[0], &args[1]);
    let store = Store::open(path).expect("open");
    let q = store
        .queue_with(
            name,
            QueueOptions::default().dedup_window(Duration::from_secs(3600)),
        )
        .expect("queue");
    let id = q
        .send(Message::new("before").message_key("before"))
        .expect("send before the failure");
    println!("SENT {id} before");

    inject::FAIL.store(true, Ordering::SeqCst);
    match q.send(Message::new("during").message_key("during")) {
        Ok(id) => println!("SENT {id} during"),
        Err(e) => println!("FAILED {:?} {e}", e.kind()),
    }
    inject::FAIL.store(false, Ordering::SeqCst);

    match q.send(Message::new("after").message_key("after")) {
        Ok(id) => println!("AFTER ok {id}"),
        Err(e) => println!("AFTER {:?} {e}", e.kind()),
    }
    drop(q);
    match store.close() {
        Ok(()) => println!("CLOSE ok"),
        Err(e) => println!("CLOSE {:?} {e}", e.kind()),
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("SKIP fsync injection needs Linux");
}
