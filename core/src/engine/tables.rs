//! redb table definitions and the fixed-width key layout.
//!
//! Every hot operation is a seek on a fixed-width tuple key: the head of a queue is the first key
//! of its prefix in `READY`; due scheduled messages, expired locks and expired messages are the
//! first keys of `SCHEDULED`, `LOCK_EXPIRY` and `EXPIRING`.

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
/// (forget at ms, queue id, message_key): dedup entries by expiry, so old keys are forgotten.
pub const DEDUP_EXPIRY: TableDefinition<(u64, u32, &str), ()> =
    TableDefinition::new("postbox.dedup_expiry");

/// Current on-disk format. Bumped when a table or record layout changes incompatibly.
pub const FORMAT_VERSION: u64 = 1;

pub const KEY_FORMAT: &str = "format_version";

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

/// Where a message is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ready = 0,
    Locked = 1,
    Scheduled = 2,
}

/// The mutable part of a message. Times are milliseconds since the Unix epoch; 0 means unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    pub queue: u32,
    pub priority: u8,
    pub status: Status,
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
    pub fn encode(&self) -> [u8; STATE_LEN] {
        let mut b = [0u8; STATE_LEN];
        b[0..4].copy_from_slice(&self.queue.to_le_bytes());
        b[4] = self.priority;
        b[5] = self.status as u8;
        b[8..12].copy_from_slice(&self.delivery_count.to_le_bytes());
        b[12..16].copy_from_slice(&self.size.to_le_bytes());
        b[16..24].copy_from_slice(&self.enqueued_at.to_le_bytes());
        b[24..32].copy_from_slice(&self.visible_at.to_le_bytes());
        b[32..40].copy_from_slice(&self.expires_at.to_le_bytes());
        b[40..48].copy_from_slice(&self.lock_owner.to_le_bytes());
        b[48..56].copy_from_slice(&self.lock_token.to_le_bytes());
        b[56..64].copy_from_slice(&self.locked_until.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; STATE_LEN]) -> Result<State, String> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let status = match b[5] {
            0 => Status::Ready,
            1 => Status::Locked,
            2 => Status::Scheduled,
            other => return Err(format!("unknown message status {other}")),
        };
        if b[4] > crate::message::MAX_PRIORITY {
            return Err(format!("priority {} out of range", b[4]));
        }
        Ok(State {
            queue: u32_at(0),
            priority: b[4],
            status,
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
pub struct Counters {
    pub active: u64,
    pub locked: u64,
    pub scheduled: u64,
    pub bytes: u64,
}

impl Counters {
    pub fn encode(&self) -> [u8; COUNTERS_LEN] {
        let mut b = [0u8; COUNTERS_LEN];
        b[0..8].copy_from_slice(&self.active.to_le_bytes());
        b[8..16].copy_from_slice(&self.locked.to_le_bytes());
        b[16..24].copy_from_slice(&self.scheduled.to_le_bytes());
        b[24..32].copy_from_slice(&self.bytes.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; COUNTERS_LEN]) -> Counters {
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        Counters {
            active: u64_at(0),
            locked: u64_at(8),
            scheduled: u64_at(16),
            bytes: u64_at(24),
        }
    }

    pub fn total(&self) -> u64 {
        self.active + self.locked + self.scheduled
    }

    pub fn slot(&mut self, status: Status) -> &mut u64 {
        match status {
            Status::Ready => &mut self.active,
            Status::Locked => &mut self.locked,
            Status::Scheduled => &mut self.scheduled,
        }
    }
}
