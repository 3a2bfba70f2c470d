//! The open redb database of a store, and its recovery after an I/O failure.
//!
//! redb refuses every later transaction once a write failed part way ("previous I/O error"),
//! and the only way back is to open the file again. A store whose disk filled up must not stay
//! dead until the application reopens it (invariant 9, `docs/design.md` § "I/O failures"), so
//! the slot drops the failed database and opens the file again on the next use: the
//! operations that fail while that is impossible keep saying why (`StorageFull` while the disk
//! is full), and the first one after space was freed finds a working store.
//!
//! Reopening recovers the way opening does: a store with a write-ahead log replays it, so
//! the store holds exactly what the log made durable (a batch whose record was not written is
//! gone, as its callers were told), checkpoints, and starts a fresh log cycle.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::RwLock;
use redb::{Database, ReadableDatabase};

use super::tables::{COUNTERS, COUNTERS_LEN};
use super::wal::Wal;
use super::{guarded, panic_to_error};

use crate::error::{Error, Result};
use crate::options::EngineConfig;

/// The `COUNTERS` key of an owner's commit mark: the number of the last batch that owner
/// committed, written in every committing batch so that after a commit that failed the reopened
/// file tells whether it landed (see [`DbSlot::resolve`]). The marks share `COUNTERS` with the
/// queue counts (which every batch writes anyway) so that they cost no extra table per commit;
/// they sit at the top of the key space, and queue ids stay below [`FIRST_MARK_KEY`].
pub fn mark_key(owner: u64) -> u32 {
    u32::MAX - (owner & 0x7fff_ffff) as u32
}

/// The lowest `COUNTERS` key a commit mark can have.
pub const FIRST_MARK_KEY: u32 = 1 << 31;

/// A mark as stored in `COUNTERS`.
pub fn encode_mark(batch: u64) -> [u8; COUNTERS_LEN] {
    let mut v = [0u8; COUNTERS_LEN];
    v[..8].copy_from_slice(&batch.to_le_bytes());
    v
}

/// Writes this owner's commit mark for `batch` straight into `txn` (a batch that was to be
/// logged and is committed durably after all).
///
/// # Errors
///
/// redb's errors.
pub fn write_mark(txn: &redb::WriteTransaction, owner: u64, batch: u64) -> Result<()> {
    txn.open_table(COUNTERS)?
        .insert(mark_key(owner), encode_mark(batch))?;
    Ok(())
}

enum State {
    Open(Arc<Database>, Option<Arc<Wal>>),
    /// The last write failed; the file is opened again on the next use.
    Broken,
    Closed,
}

/// Holds the database, hands out clones of it, and reopens it after a failure.
pub struct DbSlot {
    state: RwLock<State>,
    path: PathBuf,
    builder: EngineConfig,
}

impl DbSlot {
    pub fn new(
        db: Arc<Database>,
        wal: Option<Wal>,
        path: PathBuf,
        builder: EngineConfig,
    ) -> DbSlot {
        DbSlot {
            state: RwLock::new(State::Open(db, wal.map(Arc::new))),
            path,
            builder,
        }
    }

    /// The database, reopening the file first if the last write failed.
    ///
    /// # Errors
    ///
    /// `Closed` after [`DbSlot::close`]; the reopen's error (e.g. `StorageFull`) while the file
    /// cannot be opened again.
    pub fn get(&self) -> Result<Arc<Database>> {
        Ok(self.get_with_log()?.0)
    }

    /// The database and, in log mode, its write-ahead log (see [`DbSlot::get`]).
    ///
    /// # Errors
    ///
    /// As [`DbSlot::get`].
    pub fn get_with_log(&self) -> Result<(Arc<Database>, Option<Arc<Wal>>)> {
        match &*self.state.read() {
            State::Open(db, wal) => return Ok((db.clone(), wal.clone())),
            State::Closed => return Err(Error::Closed),
            State::Broken => {}
        }
        self.reopen()
    }

    /// The database if it is open now, without trying to reopen it (for wake-ups, which must
    /// not do I/O on a failed store).
    pub fn peek(&self) -> Option<Arc<Database>> {
        match &*self.state.read() {
            State::Open(db, _) => Some(db.clone()),
            _ => None,
        }
    }

    /// Drops the database after a failed write: redb refuses it from now on.
    pub fn mark_broken(&self) {
        let mut state = self.state.write();
        if matches!(*state, State::Open(..)) {
            *state = State::Broken;
        }
        tracing::warn!(path = %self.path.display(), "write failed; the store file will be opened again");
    }

    fn reopen(&self) -> Result<(Arc<Database>, Option<Arc<Wal>>)> {
        let mut state = self.state.write();
        self.reopen_locked(&mut state)
    }

    /// [`DbSlot::reopen`] under the write lock the caller holds.
    fn reopen_locked(&self, state: &mut State) -> Result<(Arc<Database>, Option<Arc<Wal>>)> {
        match &*state {
            State::Open(db, wal) => return Ok((db.clone(), wal.clone())),
            State::Closed => return Err(Error::Closed),
            State::Broken => {}
        }
        // Another thread may still hold a clone of the failed database for a moment (a read
        // that started before the failure); redb's file lock is released only when the last
        // clone drops, so a few retries let it finish.
        let mut tries = 0;
        let opened = loop {
            match super::file::reopen(&self.path, &self.builder) {
                Ok(opened) => break opened,
                Err(Error::AlreadyOpen(_)) if tries < 1000 => {
                    tries += 1;
                    std::thread::yield_now();
                }
                Err(e) => return Err(e),
            }
        };
        tracing::info!(path = %self.path.display(), "store file opened again after a failed write");
        let db = Arc::new(opened.db);
        let wal = opened.wal.map(Arc::new);
        *state = State::Open(db.clone(), wal.clone());
        Ok((db, wal))
    }

    /// Runs `f` with the database to itself (`docs/design.md` § Compaction): no operation of
    /// this process starts while it runs (they wait on the slot's lock, which `f` holds), and
    /// the ones in progress when it was called finish first, since each holds a clone of the
    /// database until it ends. `wait` bounds how long they may take; the log is passed along
    /// for a checkpoint.
    ///
    /// A failed write leaves redb refusing the database, and a panic leaves it in doubt: either
    /// way it is dropped, and the next use opens the file again (as after any failed write).
    ///
    /// # Errors
    ///
    /// `Closed`; the reopen's error when the last write had failed and the file cannot be
    /// opened again; `AlreadyOpen` when operations in progress still hold the database after
    /// `wait`; `f`'s error (a panic in it as `Corrupted`).
    pub fn exclusive<T>(
        &self,
        wait: Duration,
        f: impl FnOnce(&mut Database, Option<&Wal>) -> Result<T>,
    ) -> Result<T> {
        let deadline = Instant::now().checked_add(wait);
        let mut state = self.state.write();
        self.reopen_locked(&mut state)?;
        let State::Open(db, wal) = &mut *state else {
            return Err(Error::Closed);
        };
        // Operations in progress hold clones of the database and drop them when they end; new
        // ones wait for the lock held here. An operation whose failure marks the slot broken
        // waits for this lock while it still holds its clone: the deadline ends that wait.
        let mut pause = Duration::from_micros(20);
        while Arc::get_mut(db).is_none() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::AlreadyOpen(format!(
                    "{} is busy: operations of this process were still running after {} ms, and compaction needs the store to itself; try again",
                    self.path.display(),
                    wait.as_millis()
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
        let Some(db) = Arc::get_mut(db) else {
            return Err(Error::Panic(
                "the database was shared again under the slot's lock".into(),
            ));
        };
        let wal = wal.as_deref();
        let result = guarded::catch(|| f(db, wal)).unwrap_or_else(|p| Err(panic_to_error(p)));
        if let Err(e) = &result
            && (e.is_io_failure() || matches!(e, Error::Corrupted(_)))
        {
            let old = std::mem::replace(&mut *state, State::Broken);
            // redb's drop can panic on a store damaged under it.
            let _ = guarded::catch(move || drop(old));
            tracing::warn!(path = %self.path.display(), error = %e, "compaction failed; the store file will be opened again");
        }
        result
    }

    /// Takes the database out for closing; later uses fail with `Closed`.
    pub fn close(&self) -> (Option<Arc<Database>>, Option<Arc<Wal>>) {
        match std::mem::replace(&mut *self.state.write(), State::Closed) {
            State::Open(db, wal) => (Some(db), wal),
            _ => (None, None),
        }
    }

    /// Takes the database out without dropping it, in a forked child: dropping it there would
    /// write the parent's view of the file.
    pub fn leak(&mut self) {
        if let State::Open(db, wal) = std::mem::replace(self.state.get_mut(), State::Closed) {
            std::mem::forget(db);
            std::mem::forget(wal);
        }
    }

    /// Decides the outcome of batch `batch` of `owner` after its commit failed with `error`:
    /// reopens the file and reads the owner's commit mark.
    ///
    /// - No mark: the batch is not in the file (nothing of it was written where a reader or a
    ///   recovery would find it), so the caller hears the original error and may retry.
    /// - A mark after a full disk: the batch reached the file but maybe not stable storage;
    ///   one more durable commit (which writes no new pages) makes it so, and then it counts
    ///   as committed.
    /// - A mark after any other I/O error (EIO from fsync): the page cache may hold writes the
    ///   disk lost, so nothing read back is proof: the outcome stays unknown.
    pub fn resolve(&self, owner: u64, batch: u64, error: &Error) -> Resolved {
        self.mark_broken();
        let unknown = |why: String| {
            Resolved::Unknown(Error::OutcomeUnknown(format!(
                "{}; {why}",
                error_text(error)
            )))
        };
        let db = match self.get() {
            Ok(db) => db,
            Err(e) => {
                return unknown(format!(
                    "the store could not be opened again to check ({e})"
                ));
            }
        };
        let mark = (|| -> Result<u64> {
            let txn = db.begin_read()?;
            let t = txn.open_table(COUNTERS)?;
            Ok(t.get(mark_key(owner))?.map_or(0, |g| {
                let v = g.value();
                let mut b = [0u8; 8];
                b.copy_from_slice(&v[..8]);
                u64::from_le_bytes(b)
            }))
        })();
        match mark {
            Err(e) => unknown(format!("the commit mark could not be read ({e})")),
            Ok(m) if m < batch => Resolved::NotApplied,
            Ok(_) if !matches!(error, Error::StorageFull(_)) => unknown(
                "the commit reached the file but an I/O error leaves its durability in doubt"
                    .into(),
            ),
            Ok(_) => match db
                .begin_write()
                .map_err(Error::from)
                .and_then(|t| Ok(t.commit()?))
            {
                Ok(()) => Resolved::Applied,
                Err(e) => {
                    self.mark_broken();
                    unknown(format!(
                        "the commit reached the file but could not be made durable ({e})"
                    ))
                }
            },
        }
    }
}

/// What [`DbSlot::resolve`] found out about a failed commit.
pub enum Resolved {
    /// The batch is durable after all.
    Applied,
    /// The batch is not in the file: its callers may retry.
    NotApplied,
    /// Nobody can tell; the error says why (`OutcomeUnknown`).
    Unknown(Error),
}

fn error_text(e: &Error) -> String {
    match e {
        Error::OutcomeUnknown(m) => m.clone(),
        other => other.to_string(),
    }
}
