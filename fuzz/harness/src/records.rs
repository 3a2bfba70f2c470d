//! Target `records`: every decoder of a stored record and of the write-ahead log, given
//! arbitrary bytes, returns a value or an error; a value re-encodes to the same value.
//!
//! The first byte picks the decoder. Checksummed formats are reached twice: raw (the checksum
//! almost always fails, which must be an error) and sealed with a correct checksum, so that the
//! field parser behind it meets arbitrary fields.

use postbox::fuzzing as f;

/// Records past this are no more interesting, only slower.
const MAX_INPUT: usize = 64 * 1024;

const ID: u64 = 0x0102_0304_0506_0708;

pub fn run(data: &[u8]) {
    let Some((pick, rest)) = crate::split_first(data) else {
        return;
    };
    if rest.len() > MAX_INPUT {
        return;
    }
    match pick % 14 {
        0 => {
            f::envelope(ID, rest);
        }
        1 => {
            f::envelope(ID, &f::seal_record(&ID.to_le_bytes(), rest));
        }
        2 => {
            f::held("series", 9, rest);
        }
        3 => {
            // A held message's envelope is sealed like any other, bound to series and number.
            let key = u64::from(crc32c::crc32c(b"series")) << 32 ^ 9;
            let (head, env) = rest.split_at(
                rest.len()
                    .min(rest.first().map_or(0, |b| usize::from(b % 24))),
            );
            let mut buf = head.to_vec();
            buf.extend_from_slice(&f::seal_record(&key.to_le_bytes(), env));
            f::held("series", 9, &buf);
        }
        4 => {
            f::queue_record("orders", rest);
        }
        5 => {
            f::queue_record("orders", &f::seal_record(b"orders", rest));
        }
        6 => {
            let mut row = [0u8; 64];
            let n = rest.len().min(64);
            row[..n].copy_from_slice(&rest[..n]);
            f::state_row(ID, &row);
            // The same fields as an unchecked format-1 row reach every field check.
            row[5] &= 0x7f;
            row[6] = 0;
            row[7] = 0;
            f::state_row(ID, &row);
        }
        7 => {
            f::session_row(3, "group", rest);
        }
        8 => {
            let mut row = rest.to_vec();
            if row.len() >= 4 {
                let crc = crc32c::crc32c_append(
                    crc32c::crc32c_append(crc32c::crc32c(&3u32.to_le_bytes()), b"group"),
                    &row[4..],
                );
                row[..4].copy_from_slice(&crc.to_le_bytes());
            }
            f::session_row(3, "group", &row);
        }
        9 => {
            f::job_row(ID, rest);
        }
        10 => {
            let mut row = rest.to_vec();
            if row.len() >= 5 {
                let crc = crc32c::crc32c_append(
                    crc32c::crc32c_append(crc32c::crc32c(&ID.to_le_bytes()), &row[..1]),
                    &row[5..],
                );
                row[1..5].copy_from_slice(&crc.to_le_bytes());
            }
            f::job_row(ID, &row);
        }
        11 => {
            f::log_body(rest);
        }
        12 => {
            let applied = rest.first().map_or(0, |b| u64::from(b % 4));
            f::log_file(rest, applied);
            let mut file = f::log_header(1, 1, 1 << 20);
            file.extend_from_slice(rest);
            f::log_file(&file, applied);
        }
        _ => {
            f::log_file(&log_of_records(1, 1, rest), 0);
        }
    }
}

/// A log file of store `store` holding well-framed records cut from `data`: each record is
/// `seq delta, body length, body`, so the chain's rules (order, gaps, stale cycles, damage)
/// meet valid checksums. The first record is numbered `base` or a little more, and the header
/// names its cycle, or (by the first byte's top bit) the next one.
pub(crate) fn log_of_records(store: u64, base: u64, data: &[u8]) -> Vec<u8> {
    // The first number sits anywhere near the store's last applied record.
    let Some((&start, mut rest)) = data.split_first() else {
        return f::log_header(store, 1, 1 << 20);
    };
    let first = base + u64::from(start % 4 / 3);
    let cycle = if start & 0x80 == 0 { first } else { first + 1 };
    let mut file = f::log_header(store, cycle, 1 << 20);
    let mut seq = first;
    let mut at_first = true;
    while let [delta, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (body, after) = tail.split_at(n);
        // Mostly the next number; sometimes a repeat, a gap or an earlier cycle's record.
        if !at_first {
            seq = match delta % 8 {
                0 => seq,
                1 => seq + 2,
                2 => seq.saturating_sub(1),
                3 => {
                    // A torn record: the rest of the file is garbage after its head.
                    let rec = f::log_record(store, cycle, seq + 1, body);
                    file.extend_from_slice(&rec[..rec.len() / 2]);
                    rest = after;
                    continue;
                }
                4 => {
                    // A record of another cycle.
                    file.extend_from_slice(&f::log_record(store, cycle + 1, seq + 1, body));
                    rest = after;
                    continue;
                }
                _ => seq + 1,
            };
        }
        at_first = false;
        file.extend_from_slice(&f::log_record(store, cycle, seq, body));
        rest = after;
    }
    if file.len() < 1 << 20 {
        file.resize(1 << 20, 0);
    }
    file
}
