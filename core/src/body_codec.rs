//! The one place that knows the body encoding of typed queues (bincode 2, standard
//! configuration: little-endian, variable-length integers). bincode 2.0.1 is pinned and no
//! longer maintained; swapping it means changing only this module.

use bincode::config::{self, Config};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Encodes `value` as a message body.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    bincode::serde::encode_to_vec(value, config::standard())
        .map_err(|e| Error::Codec(format!("encoding failed: {e}")))
}

/// Decodes a whole body; trailing bytes are an error.
///
/// A damaged length prefix must not make the decoder allocate gigabytes (that aborts the
/// process rather than failing), so the bytes it may claim are limited to a multiple of the
/// body's size. The factor covers the widest in-memory growth of a legitimate encoding (a
/// one-byte varint decoding to a 16-byte integer).
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    const GROWTH: usize = 16;
    let claim = body.len().saturating_mul(GROWTH).max(1024);
    let base = config::standard();
    let r = if claim <= 1 << 16 {
        run(body, base.with_limit::<{ 1 << 16 }>())
    } else if claim <= 1 << 20 {
        run(body, base.with_limit::<{ 1 << 20 }>())
    } else if claim <= 1 << 24 {
        run(body, base.with_limit::<{ 1 << 24 }>())
    } else if claim <= 1 << 28 {
        run(body, base.with_limit::<{ 1 << 28 }>())
    } else {
        run(body, base.with_limit::<{ usize::MAX }>())
    };
    let (value, used) = r.map_err(|e| Error::Codec(e.to_string()))?;
    if used != body.len() {
        return Err(Error::Codec(format!(
            "{} trailing bytes after the value",
            body.len() - used
        )));
    }
    Ok(value)
}

fn run<T: DeserializeOwned, C: Config>(
    body: &[u8],
    c: C,
) -> std::result::Result<(T, usize), bincode::error::DecodeError> {
    bincode::serde::decode_from_slice(body, c)
}
