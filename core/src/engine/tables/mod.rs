//! redb table definitions and the fixed-width key layout.
//!
//! Every hot operation is a seek on a fixed-width tuple key: the head of a queue is the first key
//! of its prefix in `READY`; due scheduled messages, expired locks and expired messages are the
//! first keys of `SCHEDULED`, `LOCK_EXPIRY` and `EXPIRING`.
//!
//! Every value postbox decodes from `DATA`, `QUEUES` and `STATE` carries a checksum that is
//! verified on every read (store format 2): envelopes and queue records a CRC32C (see `codec`),
//! state rows a CRC-16 (see [`State`]). redb's own page checksums are verified only by
//! `verify_on_open`, so without these a damaged value would be read back as if it were sound.

use redb::TableDefinition;

mod state;

pub use state::State;

/// Generates, from the one list of tables ([`table_list`]), the definitions, the log's number
/// lookup ([`table_id`], [`MAX_TABLE_ID`]) and the walks over every table ([`each_table`],
/// [`visit_table`]), so that a table added to the list cannot be missing from any of them.
macro_rules! tables {
    ($($(#[$doc:meta])* $id:literal $def:ident $slot:ident = $name:literal: $k:ty => $v:ty;)*) => {
        $($(#[$doc])* pub const $def: TableDefinition<$k, $v> = TableDefinition::new($name);)*

        /// The log number of the table named `name`.
        pub fn table_id(name: &str) -> Option<u8> {
            $(if name == $name { return Some($id); })*
            None
        }

        /// The highest log number in use.
        pub const MAX_TABLE_ID: u8 = {
            let mut max = 0u8;
            $(if $id > max { max = $id; })*
            max
        };

        /// Shows `visitor` every table, in log-number order, stopping at its first error.
        ///
        /// # Errors
        ///
        /// The visitor's.
        pub fn each_table<T: TableVisitor>(visitor: &mut T) -> Result<(), T::Error> {
            $(visitor.visit($def)?;)*
            Ok(())
        }

        /// Shows `visitor` the table with log number `id`; `None` for a number no table has.
        pub fn visit_table<T: TableVisitor>(id: u8, visitor: &mut T) -> Option<Result<(), T::Error>> {
            match id {
                $($id => Some(visitor.visit($def)),)*
                _ => None,
            }
        }
    };
}

/// Something done to a table whatever its types (they differ from table to table, so the
/// table is handed over as its typed definition).
pub trait TableVisitor {
    type Error;
    /// Called with one table's definition.
    ///
    /// # Errors
    ///
    /// Whatever stops the walk.
    fn visit<K: redb::Key + 'static, V: redb::Value + 'static>(
        &mut self,
        def: TableDefinition<K, V>,
    ) -> Result<(), Self::Error>;
}

/// Every table, declared once: its log number, its definition's name, the name of its slot in
/// a batch (`batch::slots`, which cannot derive it: `macro_rules!` cannot lowercase), its redb
/// name, and its key and value types. `table_list!(m)` hands the list to macro `m`, so each
/// thing made per table is generated from here. Log numbers are written in the write-ahead
/// log: never change or reuse one.
macro_rules! table_list {
    ($m:ident) => {
        $m! {
            /// Small named integers: the format version.
            1 META meta = "postbox.meta": &'static str => u64;
            /// Queue name → encoded queue record.
            2 QUEUES queues = "postbox.queues": &'static str => &'static [u8];
            /// Queue id → queue name, to validate ids held by handles and to name queues in
            /// envelopes.
            3 QUEUE_IDS queue_ids = "postbox.queue_ids": u32 => &'static str;
            /// Queue id → exact counts, updated in the same write transaction as every change.
            4 COUNTERS counters = "postbox.counters": u32 => [u8; COUNTERS_LEN];
            /// Message id → fixed-size mutable state (queue, status, delivery count, lock).
            5 STATE state = "postbox.state": u64 => [u8; STATE_LEN];
            /// Message id → immutable envelope (versioned) followed by the body. Kept apart from
            /// `STATE` so that locking a large message never rewrites its body.
            6 DATA data = "postbox.data": u64 => &'static [u8];
            /// (queue id, 7 - priority, message id): messages receivable now, in delivery order.
            7 READY ready = "postbox.ready": (u32, u8, u64) => ();
            /// (visible_at ms, message id): scheduled messages, due first.
            8 SCHEDULED scheduled = "postbox.scheduled": (u64, u64) => ();
            /// (expires_at ms, message id): unlocked messages with a time to live.
            9 EXPIRING expiring = "postbox.expiring": (u64, u64) => ();
            /// (locked_until ms, message id): held locks, soonest expiry first.
            10 LOCK_EXPIRY lock_expiry = "postbox.lock_expiry": (u64, u64) => ();
            /// Owner id → (pid, process start time): the processes that have the store open.
            11 OWNERS owners = "postbox.owners": u64 => (u32, u64);
            /// Owner id → where the owner runs (a hash of the boot id and PID namespace; see
            /// `owners`). Kept apart from `OWNERS` so that stores created before it existed stay
            /// readable.
            12 OWNER_SCOPES owner_scopes = "postbox.owner_scopes": u64 => u64;
            /// (queue id, message_key) → (message id, forget at ms): duplicate detection.
            13 DEDUP dedup = "postbox.dedup": (u32, &'static str) => (u64, u64);
            /// (collator queue id, series, sequence number) → the message (`codec::encode_held`):
            /// messages a collator holds until their series is contiguous up to them. They get an
            /// id only when released, so ids (and delivery order) follow the series (format 3).
            16 HELD held = "postbox.held": (u32, &'static str, u64) => &'static [u8];
            /// (collator queue id, series) → the series' progress ([`SeriesState`]), while it is
            /// incomplete.
            17 SERIES series = "postbox.series": (u32, &'static str) => [u8; 24];
            /// (session queue id, group, message id): every message of a queue that requires
            /// sessions, by group in send order (format 3).
            18 SESSION_MSGS session_msgs = "postbox.session_msgs": (u32, &'static str, u64) => ();
            /// (session queue id, group) → the session's lock and state ([`SessionRecord`])
            /// (format 3).
            19 SESSIONS sessions = "postbox.sessions": (u32, &'static str) => &'static [u8];
            /// (queue id, message id): deferred messages, set aside until received by id
            /// (format 3).
            15 DEFERRED deferred = "postbox.deferred": (u32, u64) => ();
            /// Job id → the job's record ([`JobRecord`]): counts, sealed flag and continuation
            /// (format 4).
            20 JOBS jobs = "postbox.jobs": u64 => &'static [u8];
            /// (job id, message id) → the piece's state: byte 0 outcome (0 pending, 1 completed, 2
            /// dead-lettered), bytes 1..9 when it ended (ms) (format 4).
            21 JOB_PIECES job_pieces = "postbox.job_pieces": (u64, u64) => [u8; 9];
            /// Message id → the job it is a piece of, while it is pending (state flag `0x10`)
            /// (format 4).
            22 PIECE_JOB piece_job = "postbox.piece_job": u64 => u64;
            /// (message id, key): the progress keys a receiver recorded on a message it holds
            /// (state flag `0x08`), removed with the message (format 4).
            23 CHECKPOINTS checkpoints = "postbox.checkpoints": (u64, &'static str) => ();
            /// (table name, key) → value: the application's own rows, written in the same commit as
            /// its sends and settles (format 4).
            24 APP_ROWS app_rows = "postbox.app_rows": (&'static str, &'static [u8]) => &'static [u8];
            /// (forget at ms, queue id, message_key): dedup entries by expiry, so old keys are
            /// forgotten.
            14 DEDUP_EXPIRY dedup_expiry = "postbox.dedup_expiry": (u64, u32, &'static str) => ();
        }
    };
}

pub(crate) use table_list;

table_list!(tables);

/// Current on-disk format. Bumped when a table or record layout changes incompatibly.
///
/// - 1: the first format; no record checksums.
/// - 2: every record is checksummed: envelopes and queue records are written in their format 2
///   (a CRC32C, see `codec`), state rows with a CRC-16 (see [`State`]). A writable open of a
///   format-1 store upgrades it in one write transaction (`file::upgrade`): state rows and queue
///   records are rewritten with their checksums; envelopes keep format 1 (rewriting every body
///   would cost as much as the store is large) and are decoded unchecked.
/// - 3: deferred messages (state status 3 and flag bit 0x40, "deferred: its lock ends in the
///   deferred state"; the `DEFERRED` index), collators (`HELD`, `SERIES`), sessions
///   (`SESSION_MSGS`, `SESSIONS`, queue record extension 2), topics
///   (queue record kind 2 and extension fields), and per-queue extra counts in `COUNTERS` under
///   [`EXTRA_COUNTS_BASE`] + queue id. Upgrading from 2 creates the new tables; no row changes.
/// - 4: jobs (`JOBS`, `JOB_PIECES`, `PIECE_JOB`; state flag `0x10`), checkpoints
///   (`CHECKPOINTS`; state flag `0x08`), application tables (`APP_ROWS`), queue record
///   extensions 7–9 (temporary owner, idle deletion, receipts) and each queue's last activity
///   in its extra counts row. Upgrading creates the tables; no row changes.
/// - 5: the write-ahead log. A store of this format may have work in its `-log` file that is
///   not in the store file yet, so an older postbox (which would ignore the log and lose that
///   work) must refuse it. `META` gains [`KEY_LOG_APPLIED`]. Upgrading writes the version.
/// - 6: the store's identity and what it needs of its log (`META` gains [`KEY_STORE_ID`],
///   [`KEY_LOG_CYCLE`], [`KEY_LOG_LENGTH`]; log format 2 names the store and the cycle, and
///   salts every record's checksum with them). Opening a store of format 5 replays its log of
///   format 1 first, then upgrades: the version and a new identity.
pub const FORMAT_VERSION: u64 = 6;

/// The sequence number of the last write-ahead log record the store file holds durably
/// (written by every checkpoint; absent = 0).
pub const KEY_LOG_APPLIED: &str = "log_applied";

/// The store's identity: a random number given at creation (or at the upgrade to format 6),
/// written in its log's header and salting every record's checksum, so that a log is never
/// replayed into another store.
pub const KEY_STORE_ID: &str = "store_id";

/// The cycle the write-ahead log was in at the last checkpoint (the sequence number of the
/// cycle's first record); 0 or absent when the store needs no log (closed cleanly, or
/// recovered). A store that names a cycle refuses to open without that cycle's log.
pub const KEY_LOG_CYCLE: &str = "log_cycle";

/// The log's length in bytes when that cycle began: it is never shorter while it is needed.
pub const KEY_LOG_LENGTH: &str = "log_length";

/// A new store identity: random, never 0.
pub fn new_store_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // std's hasher keys come from the system's random source; the time and the process mix
    // in what a reused key would share.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish().max(1)
}

pub const KEY_FORMAT: &str = "format_version";
/// The CRC32C of the format version's little-endian bytes, written beside it by stores created
/// or upgraded since format 2, so that a damaged version number reads as damage rather than as
/// a newer format. Stores without it (written before it existed) are trusted as they are.
pub const KEY_FORMAT_CHECK: &str = "format_version_crc";

/// The check value of format version `v`.
pub fn format_check(v: u64) -> u64 {
    u64::from(crc32c::crc32c(&v.to_le_bytes()))
}

/// Writes this version's format number and its check into the meta table.
pub fn write_format(
    meta: &mut redb::Table<'_, &'static str, u64>,
) -> redb::Result<(), redb::StorageError> {
    meta.insert(KEY_FORMAT, FORMAT_VERSION)?;
    meta.insert(KEY_FORMAT_CHECK, format_check(FORMAT_VERSION))?;
    Ok(())
}

/// The `COUNTERS` key that holds the id sequences instead of a queue's counts (queue ids start
/// at 1). Sharing the table with the counters means a send dirties one page fewer per commit.
pub const SEQUENCES_KEY: u32 = 0;

/// The store-wide sequences, each the next value to hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seq {
    Message = 0,
    Queue = 1,
    Token = 2,
    Owner = 3,
}

/// Encodes the four sequences as one `COUNTERS` value.
pub fn encode_sequences(seqs: &[u64; 4]) -> [u8; COUNTERS_LEN] {
    let mut b = [0u8; COUNTERS_LEN];
    for (i, v) in seqs.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    b
}

pub fn decode_sequences(b: &[u8; COUNTERS_LEN]) -> [u64; 4] {
    let mut out = [0u64; 4];
    for (i, v) in out.iter_mut().enumerate() {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[i * 8..i * 8 + 8]);
        *v = u64::from_le_bytes(a);
    }
    out
}

pub const STATE_LEN: usize = 64;
pub const COUNTERS_LEN: usize = 32;

/// `COUNTERS` keys from here on hold a queue's extra counts (deferred, and room for three
/// more), keyed `EXTRA_COUNTS_BASE + queue id`: queue ids stay below it, and the commit marks
/// sit above it (`db::FIRST_MARK_KEY`). A row exists only once a count in it was non-zero, so
/// queues that never use these states cost nothing.
pub const EXTRA_COUNTS_BASE: u32 = 1 << 30;

/// Where a message is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ready = 0,
    Locked = 1,
    Scheduled = 2,
    /// Set aside by its receiver: never delivered by a normal receive, only by id.
    Deferred = 3,
}

/// A session's lock (owner, token, expiry; token 0: not held) and its state, a small value
/// the receivers of the session keep with it across deliveries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionRecord {
    pub owner: u64,
    pub token: u64,
    pub locked_until: u64,
    pub state: Option<Vec<u8>>,
}

impl SessionRecord {
    /// Whether a receiver holds the lock at `now`.
    pub fn is_held(&self, now: u64) -> bool {
        self.token != 0 && self.locked_until > now
    }

    /// The row, checksummed and bound to its queue and group.
    pub fn encode(&self, q: u32, group: &str) -> Vec<u8> {
        let mut b = Vec::with_capacity(32 + self.state.as_ref().map_or(0, Vec::len));
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&self.owner.to_le_bytes());
        b.extend_from_slice(&self.token.to_le_bytes());
        b.extend_from_slice(&self.locked_until.to_le_bytes());
        match &self.state {
            None => b.push(0),
            Some(s) => {
                b.push(1);
                b.extend_from_slice(s);
            }
        }
        let crc = session_crc(q, group, &b[4..]);
        b[0..4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a row, verifying its checksum.
    pub fn decode(q: u32, group: &str, b: &[u8]) -> Result<SessionRecord, String> {
        if b.len() < 29 {
            return Err("session row truncated".into());
        }
        let stored = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if stored != session_crc(q, group, &b[4..]) {
            return Err("session row checksum mismatch".into());
        }
        let at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let state = match b[28] {
            0 => None,
            1 => Some(b[29..].to_vec()),
            t => return Err(format!("bad session state tag {t}")),
        };
        Ok(SessionRecord {
            owner: at(4),
            token: at(12),
            locked_until: at(20),
            state,
        })
    }
}

fn session_crc(q: u32, group: &str, rest: &[u8]) -> u32 {
    let head = crc32c::crc32c_append(crc32c::crc32c(&q.to_le_bytes()), group.as_bytes());
    crc32c::crc32c_append(head, rest)
}

/// A collator's progress on one series: the next sequence number it will release, and the
/// series' length once known (declared by a message, or the number of the one marked last).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeriesState {
    pub next: u64,
    /// 0: not known yet.
    pub length: u64,
    /// Messages held now.
    pub held: u64,
}

impl SeriesState {
    pub fn encode(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0..8].copy_from_slice(&self.next.to_le_bytes());
        b[8..16].copy_from_slice(&self.length.to_le_bytes());
        b[16..24].copy_from_slice(&self.held.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; 24]) -> SeriesState {
        let at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        SeriesState {
            next: at(0),
            length: at(8),
            held: at(16),
        }
    }
}

/// Exact per-queue counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    pub active: u64,
    pub locked: u64,
    pub scheduled: u64,
    pub bytes: u64,
    /// Kept in the queue's extra counts row (see [`EXTRA_COUNTS_BASE`]).
    pub deferred: u64,
    /// Messages a collator holds (extra counts row; they have no state row until released).
    pub held: u64,
    /// When the queue last saw a send, receive, settle or renewal (ms; extra counts row, bytes
    /// 16..24, format 4). Written at most once a second per process (see `Batch::flush`).
    pub last_activity: u64,
}

impl QueueCounts {
    pub fn encode(&self) -> [u8; COUNTERS_LEN] {
        let mut b = [0u8; COUNTERS_LEN];
        b[0..8].copy_from_slice(&self.active.to_le_bytes());
        b[8..16].copy_from_slice(&self.locked.to_le_bytes());
        b[16..24].copy_from_slice(&self.scheduled.to_le_bytes());
        b[24..32].copy_from_slice(&self.bytes.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; COUNTERS_LEN]) -> QueueCounts {
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        QueueCounts {
            active: u64_at(0),
            locked: u64_at(8),
            scheduled: u64_at(16),
            bytes: u64_at(24),
            deferred: 0,
            held: 0,
            last_activity: 0,
        }
    }

    /// The extra counts row.
    pub fn encode_extra(&self) -> [u8; COUNTERS_LEN] {
        let mut b = [0u8; COUNTERS_LEN];
        b[0..8].copy_from_slice(&self.deferred.to_le_bytes());
        b[8..16].copy_from_slice(&self.held.to_le_bytes());
        b[16..24].copy_from_slice(&self.last_activity.to_le_bytes());
        b
    }

    /// Takes the extra counts from their row.
    pub fn set_extra(&mut self, b: &[u8; COUNTERS_LEN]) {
        let at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        self.deferred = at(0);
        self.held = at(8);
        self.last_activity = at(16);
    }

    /// Whether any extra count is non-zero (a row must exist for it).
    pub fn has_extra(&self) -> bool {
        self.deferred != 0 || self.held != 0 || self.last_activity != 0
    }

    /// The extra counts, to see whether they changed.
    pub fn extra(&self) -> (u64, u64, u64) {
        (self.deferred, self.held, self.last_activity)
    }

    pub fn total(&self) -> u64 {
        self.active + self.locked + self.scheduled + self.deferred + self.held
    }

    pub fn slot(&mut self, status: Status) -> &mut u64 {
        match status {
            Status::Ready => &mut self.active,
            Status::Locked => &mut self.locked,
            Status::Scheduled => &mut self.scheduled,
            Status::Deferred => &mut self.deferred,
        }
    }
}
