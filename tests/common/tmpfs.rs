//! A tmpfs mounted for one test (root only), shared by the tests of file systems that refuse
//! writes: full, read-only.

// Each test uses the parts it needs.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// A tmpfs mounted on a temporary directory (None without root), unmounted on drop.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs { dir })
    }

    pub fn path(&self) -> &Path {
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

impl Tmpfs {
    /// Remounts read-only (`true`) or writable; false if the system refused.
    pub fn set_read_only(&self, read_only: bool) -> bool {
        let opts = if read_only {
            "remount,ro"
        } else {
            "remount,rw"
        };
        Command::new("mount")
            .args(["-o", opts])
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success())
    }
}
