//! A message's state row: its layout, its CRC-16 and its encoding.

use super::{STATE_LEN, Status};

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
