//! File systems that refuse what postbox asks of them, beside a full one (tests/disk_full.rs):
//! permission denied and a read-only file system. Each refusal reaches the caller as
//! `Error::Io` carrying the system's error number (EACCES, EROFS), the refused open changes
//! nothing, and once the refusal is lifted the store holds everything acknowledged — also what
//! a killed writer left in its write-ahead log.
//!
//! Permission checks do not apply to root, so as root the opener is `pbx-probe` run as user
//! nobody (65534); otherwise it runs as this user and the files are made unreadable or
//! unwritable instead. The read-only file system is a tmpfs remounted read-only, which needs
//! root; without it that test says SKIP and passes.

// Unix only: it runs the opener as user nobody, changes owners and modes, and remounts a
// tmpfs read-only.
#![cfg(unix)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use postbox::{Message, Store};
use postbox_tests::{Proc, arg};

#[path = "common/tmpfs.rs"]
mod tmpfs;
use tmpfs::Tmpfs;

const PROBE: &str = env!("CARGO_BIN_EXE_pbx-probe");
const CHILD: &str = env!("CARGO_BIN_EXE_pbx-child");
const NOBODY: u32 = 65534;
const EACCES: i32 = 13;
const EROFS: i32 = 30;

fn is_root() -> bool {
    // The owner of /proc/self is this process's effective user.
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// A copy of the probe that user nobody may run, removed on drop: the build's own copy may
/// sit under a directory only its owner can enter (a checkout in a `mktemp -d` directory).
struct Runnable {
    dir: tempfile::TempDir,
}

impl Runnable {
    fn new() -> Runnable {
        let dir = tempfile::tempdir().unwrap();
        chmod(dir.path(), 0o755);
        fs::copy(PROBE, dir.path().join("pbx-probe")).unwrap();
        chmod(&dir.path().join("pbx-probe"), 0o755);
        Runnable { dir }
    }

    /// Runs the probe on `path` as nobody when root, and returns its one line.
    fn probe(&self, path: &Path, log: bool, read: bool) -> String {
        let exe = self.dir.path().join("pbx-probe");
        run_probe(&exe, path, log, read, is_root())
    }
}

/// Runs `exe` (the probe) on `path`, as nobody if `nobody`, and returns its one line.
fn run_probe(exe: &Path, path: &Path, log: bool, read: bool, nobody: bool) -> String {
    let mut cmd = Command::new(exe);
    cmd.arg(path).arg(if log { "1" } else { "0" });
    if read {
        cmd.arg("read");
    }
    if nobody {
        cmd.uid(NOBODY).gid(NOBODY);
    }
    let out = cmd.output().expect("run pbx-probe");
    assert!(out.status.success(), "pbx-probe: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A store with 7 messages left of 10 sent (3 completed); returns its path.
fn seed(dir: &Path, log: bool) -> PathBuf {
    let path = dir.join("s.postbox");
    let store = Store::builder().write_ahead_log(log).open(&path).unwrap();
    let q = store.queue("q").unwrap();
    for i in 0..10 {
        q.send(Message::new(format!("m{i}"))).unwrap();
    }
    for _ in 0..3 {
        q.try_receive().unwrap().unwrap().complete().unwrap();
    }
    drop(q);
    store.close().unwrap();
    path
}

/// The queue's messages, read by this user.
fn bodies(path: &Path) -> Vec<String> {
    let store = Store::open(path).unwrap();
    let q = store.queue("q").unwrap();
    let out = q
        .browse()
        .map(|m| String::from_utf8_lossy(m.unwrap().body()).into_owned())
        .collect();
    drop(q);
    store.close().unwrap();
    out
}

fn seeded_bodies() -> Vec<String> {
    (3..10).map(|i| format!("m{i}")).collect()
}

/// A directory the probe can enter but not write, holding a seeded store.
fn locked_dir(log: bool) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = seed(dir.path(), log);
    chmod(dir.path(), if is_root() { 0o755 } else { 0o555 });
    (dir, path)
}

#[test]
fn a_store_file_the_opener_may_not_read_or_write_is_eacces() {
    let runnable = Runnable::new();
    for log in [true, false] {
        let (dir, path) = locked_dir(log);
        let original = fs::metadata(&path).unwrap();
        // Not readable by the opener: another user's 0600 file (as root), or mode 000.
        if !is_root() {
            chmod(&path, 0o000);
        }
        assert_eq!(runnable.probe(&path, log, true), format!("ERR Io {EACCES}"));
        // Readable but not writable: the opener's own file, mode 0400.
        if is_root() {
            std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        chmod(&path, 0o400);
        assert_eq!(runnable.probe(&path, log, true), format!("ERR Io {EACCES}"));
        // Lift the refusal: everything is there, and the refused opens wrote nothing.
        if is_root() {
            std::os::unix::fs::chown(&path, Some(original.uid()), Some(original.gid())).unwrap();
        }
        chmod(&path, 0o600);
        chmod(dir.path(), 0o700);
        assert_eq!(fs::metadata(&path).unwrap().len(), original.len());
        assert_eq!(bodies(&path), seeded_bodies(), "log {log}");
    }
}

#[test]
fn a_directory_the_opener_may_not_write_is_eacces_for_a_new_store_and_the_log() {
    let runnable = Runnable::new();
    let (dir, path) = locked_dir(true);
    // A new store cannot be created there, and nothing is left behind.
    let new = dir.path().join("new.postbox");
    assert_eq!(
        runnable.probe(&new, true, false),
        format!("ERR Io {EACCES}")
    );
    assert!(!new.exists());
    // An existing store the opener may write, in a directory it may not: the log cannot be
    // created beside it, so an open with the log is refused and one without it works.
    if is_root() {
        std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
    } else {
        chmod(&path, 0o600);
    }
    assert_eq!(
        runnable.probe(&path, true, false),
        format!("ERR Io {EACCES}")
    );
    assert_eq!(runnable.probe(&path, false, false), "OK 8");
    chmod(dir.path(), 0o700);
    let mut expected = seeded_bodies();
    expected.push("from the probe".into());
    assert_eq!(bodies(&path), expected);
    let leftovers: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "s.postbox")
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

#[test]
fn a_read_only_file_system_is_erofs_and_keeps_everything() {
    let Some(fs) = Tmpfs::mount("64m") else {
        eprintln!("SKIP: mounting a tmpfs needs root");
        return;
    };
    // A store closed cleanly, and one whose writer was killed with records in its log.
    let clean = seed(fs.path(), true);
    let crashed = fs.path().join("crashed.postbox");
    let mut child = Proc::spawn(
        CHILD,
        "logged",
        &[
            "logged",
            arg(&crashed),
            "q",
            "k",
            &(32u64 << 20).to_string(),
        ],
    );
    child.expect("READY");
    let mut writer = Writer::default();
    while writer.sent.len() < 50 {
        let line = child.next_line().expect("the writer stopped");
        writer.take(&line);
    }
    for line in child.kill9() {
        writer.take(&line);
    }
    let log = PathBuf::from(format!("{}-log", crashed.display()));
    assert!(log.exists(), "the killed writer left no log");

    assert!(fs.set_read_only(true), "remount read-only");
    for path in [&clean, &crashed] {
        for log in [true, false] {
            for read in [true, false] {
                let got = run_probe(Path::new(PROBE), path, log, read, false);
                assert_eq!(got, format!("ERR Io {EROFS}"), "{}", path.display());
            }
        }
    }
    assert!(fs.set_read_only(false), "remount writable");
    assert_eq!(bodies(&clean), seeded_bodies());
    let found = bodies(&crashed);
    for (id, body) in &writer.sent {
        let gone = writer.done.contains(id) || writer.taking.contains(id);
        assert!(found.contains(body) || gone, "acknowledged {body} is lost");
        assert!(
            !(found.contains(body) && writer.done.contains(id)),
            "completed {body} is back"
        );
    }
    println!(
        "read-only file system: {} acknowledged sends of a killed writer checked",
        writer.sent.len()
    );
}

/// What the killed writer (`pbx-child logged`) reported: its sends, and the messages its
/// transactions took (`GOT`) and consumed (`DONE`).
#[derive(Default)]
struct Writer {
    sent: Vec<(String, String)>,
    taking: Vec<String>,
    done: Vec<String>,
}

impl Writer {
    fn take(&mut self, line: &str) {
        let mut words = line.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("SENT"), Some(id), Some(body)) => self.sent.push((id.into(), body.into())),
            (Some("GOT"), Some(id), _) => self.taking.push(id.into()),
            (Some("DONE"), Some(id), _) => self.done.push(id.into()),
            _ => {}
        }
    }
}
