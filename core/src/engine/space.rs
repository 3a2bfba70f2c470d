//! Whether the disk under a store is short of space (`docs/design.md` § I/O failures, "A full
//! disk").
//!
//! A store that logs makes redb's commits non-durable between checkpoints, and redb cannot
//! reuse the pages such a commit frees until the next durable commit: between checkpoints the
//! store file takes room for every page the batches rewrote, on top of the log. On a disk with
//! little room that is what fills it. So once a write failed for want of space, every batch is
//! a durable commit (a checkpoint: freed pages are reused at once, and the log restarts at its
//! first slot and never grows) until the file system has room again for the log's growth and
//! for the store file to be rewritten — a margin of the store file's size plus [`MARGIN`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::sync::Mutex;

/// Room beyond the store file's own size that ends the short-of-space mode.
pub const MARGIN: u64 = 4 << 20;

/// How often the free space is looked at while short.
const RECHECK: Duration = Duration::from_secs(1);

/// Where the system cannot tell the free space, how long the short mode lasts after the last
/// failure.
const BLIND_HOLD: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct SpaceWatch {
    path: PathBuf,
    state: Mutex<Short>,
}

#[derive(Debug, Default)]
struct Short {
    since: Option<Instant>,
    checked: Option<Instant>,
}

impl SpaceWatch {
    pub fn new(path: &Path) -> SpaceWatch {
        SpaceWatch {
            path: path.to_owned(),
            state: Mutex::new(Short::default()),
        }
    }

    /// A write failed for want of space.
    pub fn ran_out(&self) {
        let mut s = self.state.lock();
        if s.since.is_none() {
            tracing::warn!(path = %self.path.display(), "the disk is full: every commit is durable until space is back");
        }
        s.since = Some(Instant::now());
        s.checked = Some(Instant::now());
    }

    /// Whether batches must commit durably for want of space. Looks at the file system at
    /// most once a [`RECHECK`] while short; costs a lock otherwise.
    pub fn is_short(&self) -> bool {
        let mut s = self.state.lock();
        let Some(since) = s.since else {
            return false;
        };
        if s.checked.is_some_and(|c| c.elapsed() < RECHECK) {
            return true;
        }
        s.checked = Some(Instant::now());
        let room = crate::os::space::available(&self.path);
        let needed = std::fs::metadata(&self.path)
            .map_or(0, |m| m.len())
            .saturating_add(MARGIN);
        let back = match room {
            Some(room) => room >= needed,
            None => since.elapsed() >= BLIND_HOLD,
        };
        if back {
            tracing::info!(path = %self.path.display(), "space is back: commits go through the log again");
            s.since = None;
        }
        !back
    }
}
