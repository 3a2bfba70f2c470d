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

/// Small named integers: the format version.
pub const META: TableDefinition<&str, u64> = TableDefinition::new("postbox.meta");
/// Queue name → encoded queue record.
pub const QUEUES: TableDefinition<&str, &[u8]> = TableDefinition::new("postbox.queues");
/// Queue id → queue name, to validate ids held by handles and to name queues in envelopes.
pub const QUEUE_IDS: TableDefinition<u32, &str> = TableDefinition::new("postbox.queue_ids");
/// Queue id → exact counts, updated in the same write transaction as every change.
pub const COUNTERS: TableDefinition<u32, [u8; COUNTERS_LEN]> =
    TableDefinition::new("postbox.counters");
/// Message id → fixed-size mutable state (queue, status, delivery count, lock).
pub const STATE: TableDefinition<u64, [u8; STATE_LEN]> = TableDefinition::new("postbox.state");
/// Message id → immutable envelope (versioned) followed by the body. Kept apart from `STATE` so
/// that locking a large message never rewrites its body.
pub const DATA: TableDefinition<u64, &[u8]> = TableDefinition::new("postbox.data");
/// (queue id, 7 - priority, message id): messages receivable now, in delivery order.
pub const READY: TableDefinition<(u32, u8, u64), ()> = TableDefinition::new("postbox.ready");
/// (visible_at ms, message id): scheduled messages, due first.
pub const SCHEDULED: TableDefinition<(u64, u64), ()> = TableDefinition::new("postbox.scheduled");
/// (expires_at ms, message id): unlocked messages with a time to live.
pub const EXPIRING: TableDefinition<(u64, u64), ()> = TableDefinition::new("postbox.expiring");
/// (locked_until ms, message id): held locks, soonest expiry first.
pub const LOCK_EXPIRY: TableDefinition<(u64, u64), ()> =
    TableDefinition::new("postbox.lock_expiry");
/// Owner id → (pid, process start time): the processes that have the store open.
pub const OWNERS: TableDefinition<u64, (u32, u64)> = TableDefinition::new("postbox.owners");
/// Owner id → where the owner runs (a hash of the boot id and PID namespace; see `owners`).
/// Kept apart from `OWNERS` so that stores created before it existed stay readable.
pub const OWNER_SCOPES: TableDefinition<u64, u64> = TableDefinition::new("postbox.owner_scopes");
/// (queue id, message_key) → (message id, forget at ms): duplicate detection.
pub const DEDUP: TableDefinition<(u32, &str), (u64, u64)> = TableDefinition::new("postbox.dedup");
/// (collator queue id, series, sequence number) → the message (`codec::encode_held`): messages
/// a collator holds until their series is contiguous up to them. They get an id only when
/// released, so ids (and delivery order) follow the series (format 3).
pub const HELD: TableDefinition<(u32, &str, u64), &[u8]> = TableDefinition::new("postbox.held");
/// (collator queue id, series) → the series' progress ([`SeriesState`]), while it is incomplete.
pub const SERIES: TableDefinition<(u32, &str), [u8; 24]> = TableDefinition::new("postbox.series");
/// (session queue id, group, message id): every message of a queue that requires sessions, by
/// group in send order (format 3).
pub const SESSION_MSGS: TableDefinition<(u32, &str, u64), ()> =
    TableDefinition::new("postbox.session_msgs");
/// (session queue id, group) → the session's lock and state ([`SessionRecord`]) (format 3).
pub const SESSIONS: TableDefinition<(u32, &str), &[u8]> = TableDefinition::new("postbox.sessions");
/// (queue id, message id): deferred messages, set aside until received by id (format 3).
pub const DEFERRED: TableDefinition<(u32, u64), ()> = TableDefinition::new("postbox.deferred");
/// Job id → the job's record ([`JobRecord`]): counts, sealed flag and continuation (format 4).
pub const JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("postbox.jobs");
/// (job id, message id) → the piece's state: byte 0 outcome (0 pending, 1 completed, 2
/// dead-lettered), bytes 1..9 when it ended (ms) (format 4).
pub const JOB_PIECES: TableDefinition<(u64, u64), [u8; 9]> =
    TableDefinition::new("postbox.job_pieces");
/// Message id → the job it is a piece of, while it is pending (state flag `0x10`) (format 4).
pub const PIECE_JOB: TableDefinition<u64, u64> = TableDefinition::new("postbox.piece_job");
/// (message id, key): the progress keys a receiver recorded on a message it holds (state flag
/// `0x08`), removed with the message (format 4).
pub const CHECKPOINTS: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("postbox.checkpoints");
/// (table name, key) → value: the application's own rows, written in the same commit as its
/// sends and settles (format 4).
pub const APP_ROWS: TableDefinition<(&str, &[u8]), &[u8]> =
    TableDefinition::new("postbox.app_rows");
/// (forget at ms, queue id, message_key): dedup entries by expiry, so old keys are forgotten.
pub const DEDUP_EXPIRY: TableDefinition<(u64, u32, &str), ()> =
    TableDefinition::new("postbox.dedup_expiry");

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

/// Byte 5 of a state row: the message is deferred, so a lock on it ends in `Deferred` rather
/// than `Ready` (format 3).
const STATE_DEFERRED: u8 = 0x40;
/// Byte 5 of a state row: the message is in a queue that requires sessions, so it is indexed
/// in `SESSION_MSGS` too (format 3). Saves a queue lookup on every removal.
const STATE_SESSION: u8 = 0x20;

/// Byte 5 of a state row: the message is a pending piece of a job, listed in `PIECE_JOB`
/// (format 4). Only such messages pay the lookup when they settle.
const STATE_TRACKED: u8 = 0x10;
/// Byte 5 of a state row: the message has progress keys in `CHECKPOINTS` (format 4).
const STATE_CHECKPOINTED: u8 = 0x08;

/// Byte 5 of a state row: set in every row written by store format 2, meaning "bytes 6..8 hold
/// the row's CRC-16". A row without it is rejected by [`State::decode`]: a format-2 store has no
/// unchecked rows (the upgrade rewrote them all).
const STATE_CHECKSUMMED: u8 = 0x80;

/// CRC-16/CCITT-FALSE (polynomial 0x1021, initial value 0xFFFF, no reflection), eight bytes a
/// step ("slicing by 8": the eight table lookups of a step are independent, which makes it
/// several times faster than a byte at a time on a 64-byte row). The polynomial's Hamming
/// distance is 4 up to 32,751 bits and it has the factor x + 1: in a state row it detects every
/// error of one, two or three bits and every odd number of flipped bits.
fn crc16(data: &[u8]) -> u16 {
    /// `TABLES[k][i]`: the CRC register (from 0) after byte `i` followed by `k` zero bytes.
    const fn tables() -> [[u16; 256]; 8] {
        let mut t = [[0u16; 256]; 8];
        let mut i = 0;
        while i < 256 {
            let mut c = (i as u16) << 8;
            let mut k = 0;
            while k < 8 {
                c = if c & 0x8000 != 0 {
                    (c << 1) ^ 0x1021
                } else {
                    c << 1
                };
                k += 1;
            }
            t[0][i] = c;
            i += 1;
        }
        let mut k = 1;
        while k < 8 {
            let mut i = 0;
            while i < 256 {
                let prev = t[k - 1][i];
                t[k][i] = (prev << 8) ^ t[0][(prev >> 8) as usize];
                i += 1;
            }
            k += 1;
        }
        t
    }
    static TABLES: [[u16; 256]; 8] = tables();
    let t = &TABLES;
    let at = |k: usize, b: u8| t[k][usize::from(b)];
    let mut crc: u16 = 0xFFFF;
    let mut steps = data.chunks_exact(8);
    for c in &mut steps {
        let [hi, lo] = crc.to_be_bytes();
        crc = at(7, c[0] ^ hi)
            ^ at(6, c[1] ^ lo)
            ^ at(5, c[2])
            ^ at(4, c[3])
            ^ at(3, c[4])
            ^ at(2, c[5])
            ^ at(1, c[6])
            ^ at(0, c[7]);
    }
    for &b in steps.remainder() {
        crc = (crc << 8) ^ at(0, (crc >> 8) as u8 ^ b);
    }
    crc
}

/// The checksum of message `id`'s state row: the CRC-16 of the id (so that a row found under a
/// damaged key is caught) followed by the row with the checksum field (6..8) read as zeros.
fn state_crc(id: u64, b: &[u8; STATE_LEN]) -> u16 {
    let mut row = [0u8; 8 + STATE_LEN];
    row[..8].copy_from_slice(&id.to_le_bytes());
    row[8..].copy_from_slice(b);
    row[8 + 6] = 0;
    row[8 + 7] = 0;
    crc16(&row)
}

/// The mutable part of a message. Times are milliseconds since the Unix epoch; 0 means unset.
///
/// Stored as one fixed 64-byte `STATE` row (the redb value type `[u8; 64]` is part of the file
/// format, so the checksum lives in space format 1 left unused):
///
/// | bytes  | field                                                                   |
/// |--------|-------------------------------------------------------------------------|
/// | 0..4   | queue id                                                                |
/// | 4      | priority, 0..=7                                                         |
/// | 5      | bits 0–1 status, bit 7 `STATE_CHECKSUMMED`, flags 0x40 deferred, 0x20 session, 0x10 job piece, 0x08 checkpointed, bit 2 zero |
/// | 6..8   | CRC-16 of the row with these two bytes as zeros (format 2; zero in format 1) |
/// | 8..12  | delivery count                                                          |
/// | 12..16 | body size                                                               |
/// | 16..64 | enqueued at, visible at, expires at, lock owner, lock token, locked until |
///
/// Integers are little-endian. Besides the CRC, a decode checks the flag, the zero bits, the
/// status and the priority range, so a row of random bytes passes with a probability of about
/// 2^-27.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    pub queue: u32,
    pub priority: u8,
    pub status: Status,
    /// Deferred: locks on it end in `Deferred` (it is receivable by id only).
    pub deferred: bool,
    /// In a queue that requires sessions: indexed in `SESSION_MSGS` by its group.
    pub session: bool,
    /// A pending piece of a job: listed in `PIECE_JOB`.
    pub tracked: bool,
    /// Has progress keys in `CHECKPOINTS`.
    pub checkpointed: bool,
    pub delivery_count: u32,
    pub size: u32,
    pub enqueued_at: u64,
    pub visible_at: u64,
    pub expires_at: u64,
    pub lock_owner: u64,
    pub lock_token: u64,
    pub locked_until: u64,
}

impl State {
    /// The format-2 row of message `id`: flagged and checksummed.
    pub fn encode(&self, id: u64) -> [u8; STATE_LEN] {
        let mut b = [0u8; STATE_LEN];
        b[0..4].copy_from_slice(&self.queue.to_le_bytes());
        b[4] = self.priority;
        b[5] = self.status as u8
            | STATE_CHECKSUMMED
            | if self.deferred { STATE_DEFERRED } else { 0 }
            | if self.session { STATE_SESSION } else { 0 }
            | if self.tracked { STATE_TRACKED } else { 0 }
            | if self.checkpointed {
                STATE_CHECKPOINTED
            } else {
                0
            };
        b[8..12].copy_from_slice(&self.delivery_count.to_le_bytes());
        b[12..16].copy_from_slice(&self.size.to_le_bytes());
        b[16..24].copy_from_slice(&self.enqueued_at.to_le_bytes());
        b[24..32].copy_from_slice(&self.visible_at.to_le_bytes());
        b[32..40].copy_from_slice(&self.expires_at.to_le_bytes());
        b[40..48].copy_from_slice(&self.lock_owner.to_le_bytes());
        b[48..56].copy_from_slice(&self.lock_token.to_le_bytes());
        b[56..64].copy_from_slice(&self.locked_until.to_le_bytes());
        let crc = state_crc(id, &b);
        b[6..8].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a format-2 row, verifying its checksum. Errors describe the damage; callers turn
    /// them into `Corrupted`.
    pub fn decode(id: u64, b: &[u8; STATE_LEN]) -> Result<State, String> {
        if b[5] & STATE_CHECKSUMMED == 0 {
            return Err("message state has no checksum".into());
        }
        let stored = u16::from_le_bytes([b[6], b[7]]);
        let computed = state_crc(id, b);
        if stored != computed {
            return Err(format!(
                "message state checksum mismatch (stored {stored:04x}, computed {computed:04x})"
            ));
        }
        Self::decode_fields(b, b[5] & !STATE_CHECKSUMMED)
    }

    /// Decodes a format-1 row (no checksum), for the upgrade to format 2 only.
    pub fn decode_format1(b: &[u8; STATE_LEN]) -> Result<State, String> {
        if b[5] & STATE_CHECKSUMMED != 0 || b[6] != 0 || b[7] != 0 {
            return Err("not a format-1 message state".into());
        }
        Self::decode_fields(b, b[5])
    }

    fn decode_fields(b: &[u8; STATE_LEN], status: u8) -> Result<State, String> {
        let deferred = status & STATE_DEFERRED != 0;
        let session = status & STATE_SESSION != 0;
        let tracked = status & STATE_TRACKED != 0;
        let checkpointed = status & STATE_CHECKPOINTED != 0;
        let status =
            status & !(STATE_DEFERRED | STATE_SESSION | STATE_TRACKED | STATE_CHECKPOINTED);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let status = match status {
            0 => Status::Ready,
            1 => Status::Locked,
            2 => Status::Scheduled,
            3 => Status::Deferred,
            other => return Err(format!("unknown message status {other}")),
        };
        if b[4] > crate::message::MAX_PRIORITY {
            return Err(format!("priority {} out of range", b[4]));
        }
        if status == Status::Deferred && !deferred {
            return Err("a deferred message state without its flag".into());
        }
        Ok(State {
            queue: u32_at(0),
            priority: b[4],
            status,
            deferred,
            session,
            tracked,
            checkpointed,
            delivery_count: u32_at(8),
            size: u32_at(12),
            enqueued_at: u64_at(16),
            visible_at: u64_at(24),
            expires_at: u64_at(32),
            lock_owner: u64_at(40),
            lock_token: u64_at(48),
            locked_until: u64_at(56),
        })
    }

    pub fn ready_key(&self, id: u64) -> (u32, u8, u64) {
        (self.queue, crate::message::MAX_PRIORITY - self.priority, id)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> State {
        State {
            queue: 3,
            priority: 7,
            status: Status::Locked,
            deferred: false,
            session: false,
            tracked: false,
            checkpointed: false,
            delivery_count: 2,
            size: 4096,
            enqueued_at: 1_700_000_000_000,
            visible_at: 0,
            expires_at: 1_700_086_400_000,
            lock_owner: 9,
            lock_token: 12_345,
            locked_until: 1_700_000_030_000,
        }
    }

    /// CRC-16/CCITT-FALSE a byte at a time: the reference for the sliced version.
    fn crc16_bytewise(data: &[u8]) -> u16 {
        let mut crc: u16 = 0xFFFF;
        for &b in data {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    #[test]
    fn crc16_is_ccitt_false() {
        // The standard check value of CRC-16/CCITT-FALSE.
        assert_eq!(crc16(b"123456789"), 0x29B1);
        let data: Vec<u8> = (0..200u32).map(|i| (i * 73 % 256) as u8).collect();
        for len in 0..data.len() {
            assert_eq!(
                crc16(&data[..len]),
                crc16_bytewise(&data[..len]),
                "len {len}"
            );
        }
    }

    /// The checksum is linear: flipping a set of bits changes `stored ^ computed` by the XOR of
    /// what each bit alone changes. So the syndromes of the 512 single flips decide every
    /// multi-bit error: none may be zero (one bit), two equal (two bits), or one the XOR of two
    /// others (three bits).
    #[test]
    fn every_error_of_up_to_three_bits_changes_the_checksum() {
        let b = sample().encode(7);
        let syndrome = |d: &[u8; STATE_LEN]| u16::from_le_bytes([d[6], d[7]]) ^ state_crc(7, d);
        assert_eq!(syndrome(&b), 0);
        let s: Vec<u16> = (0..STATE_LEN * 8)
            .map(|bit| {
                let mut d = b;
                d[bit / 8] ^= 1 << (bit % 8);
                syndrome(&d)
            })
            .collect();
        let set: std::collections::HashSet<u16> = s.iter().copied().collect();
        assert!(!set.contains(&0), "a single flip goes unnoticed");
        assert_eq!(set.len(), s.len(), "two flips cancel out");
        for i in 0..s.len() {
            for j in i + 1..s.len() {
                assert!(!set.contains(&(s[i] ^ s[j])), "three flips cancel out");
            }
        }
    }

    #[test]
    fn state_round_trips_with_a_checksum() {
        for status in [Status::Ready, Status::Locked, Status::Scheduled] {
            let st = State { status, ..sample() };
            let b = st.encode(7);
            assert_eq!(b[5] & STATE_CHECKSUMMED, STATE_CHECKSUMMED);
            assert_eq!(State::decode(7, &b), Ok(st));
            assert!(State::decode_format1(&b).is_err());
        }
    }

    #[test]
    fn the_session_flag_round_trips() {
        let st = State {
            session: true,
            tracked: false,
            checkpointed: false,
            ..sample()
        };
        assert_eq!(State::decode(7, &st.encode(7)), Ok(st));
    }

    #[test]
    fn the_deferred_flag_round_trips_and_a_deferred_status_needs_it() {
        for status in [Status::Deferred, Status::Locked] {
            let st = State {
                status,
                deferred: true,
                ..sample()
            };
            assert_eq!(State::decode(7, &st.encode(7)), Ok(st));
        }
        let orphan = State {
            status: Status::Deferred,
            deferred: false,
            session: false,
            tracked: false,
            checkpointed: false,
            ..sample()
        };
        assert!(State::decode(7, &orphan.encode(7)).is_err());
    }

    #[test]
    fn every_single_bit_flip_of_a_state_row_is_detected() {
        let b = sample().encode(7);
        for bit in 0..STATE_LEN * 8 {
            let mut d = b;
            d[bit / 8] ^= 1 << (bit % 8);
            assert!(
                State::decode(7, &d).is_err(),
                "flip of bit {bit} went unnoticed"
            );
        }
    }

    #[test]
    fn every_double_bit_flip_of_a_state_row_is_detected() {
        let b = sample().encode(7);
        for i in 0..STATE_LEN * 8 {
            for j in i + 1..STATE_LEN * 8 {
                let mut d = b;
                d[i / 8] ^= 1 << (i % 8);
                d[j / 8] ^= 1 << (j % 8);
                assert!(
                    State::decode(7, &d).is_err(),
                    "flip of bits {i}, {j} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn format1_rows_decode_only_through_the_upgrade_path() {
        let st = sample();
        let mut old = st.encode(7);
        old[5] = st.status as u8;
        old[6] = 0;
        old[7] = 0;
        assert_eq!(State::decode_format1(&old), Ok(st));
        let err = State::decode(7, &old).unwrap_err();
        assert!(err.contains("no checksum"), "{err}");
    }
}
