//! LEB128 varints: the one encoding of numbers and lengths inside postbox's records — stored
//! values (`codec`), logical log records (`logical`) and row-change records (`wal::rows`).
//! Each of those readers names its own damage (`Corrupted` with its record's name, or a
//! decoding message); this module only says what was wrong.

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// The bytes ended before the varint did.
    Truncated,
    /// Ten bytes and still not ended: no `u64` is that long.
    TooLong,
}

/// Appends `v`: seven bits per byte, low first, the high bit set on every byte but the last.
pub fn put(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Reads one varint from the front of `rest` and moves `rest` past it. Bits past the 64th
/// of a tenth byte are dropped, as every reader of postbox's records always has.
///
/// # Errors
///
/// [`Bad::Truncated`] when `rest` ends first, [`Bad::TooLong`] after ten bytes without an
/// end; `rest` is then left where the damage was found.
pub fn take(rest: &mut &[u8]) -> Result<u64, Bad> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, after) = rest.split_first().ok_or(Bad::Truncated)?;
        *rest = after;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(Bad::TooLong)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_width_round_trips_and_every_cut_is_truncated() {
        let values = [
            0,
            1,
            0x7f,
            0x80,
            0x3fff,
            0x4000,
            u64::from(u32::MAX),
            u64::MAX,
        ];
        for v in values {
            let mut buf = Vec::new();
            put(&mut buf, v);
            let mut rest = &buf[..];
            assert_eq!(take(&mut rest), Ok(v));
            assert!(rest.is_empty());
            for cut in 0..buf.len() {
                assert_eq!(
                    take(&mut &buf[..cut]),
                    Err(Bad::Truncated),
                    "{v} cut at {cut}"
                );
            }
        }
        assert_eq!(take(&mut &[0x80u8; 10][..]), Err(Bad::TooLong));
    }
}
