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
/// process rather than failing: bincode allocates a string or byte vector before reading it),
/// so the bytes it may claim are limited to a multiple of the body's size. The factor covers
/// the widest in-memory growth of a legitimate encoding (a one-byte varint decoding to a
/// 16-byte integer). The limit is a type parameter, hence the ladder; its top rung covers the
/// largest body a queue accepts (`max_message_size` is below 4 GiB), and a larger body is
/// refused rather than decoded without a limit.
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
    } else if claim <= 1 << 30 {
        run(body, base.with_limit::<{ 1 << 30 }>())
    } else {
        decode_large(body, claim)?
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

type Decoded<T> = std::result::Result<(T, usize), bincode::error::DecodeError>;

/// The rungs of [`decode`]'s ladder past 1 GiB, which only 64-bit targets can spell.
#[cfg(target_pointer_width = "64")]
fn decode_large<T: DeserializeOwned>(body: &[u8], claim: usize) -> Result<Decoded<T>> {
    let base = config::standard();
    Ok(if claim <= 1 << 32 {
        run(body, base.with_limit::<{ 1 << 32 }>())
    } else if claim <= 1 << 34 {
        run(body, base.with_limit::<{ 1 << 34 }>())
    } else if claim <= 1 << 36 {
        run(body, base.with_limit::<{ 1 << 36 }>())
    } else {
        return Err(too_large(body));
    })
}

#[cfg(not(target_pointer_width = "64"))]
fn decode_large<T: DeserializeOwned>(body: &[u8], _claim: usize) -> Result<Decoded<T>> {
    Err(too_large(body))
}

fn too_large(body: &[u8]) -> Error {
    Error::Codec(format!(
        "a body of {} bytes is too large to decode (the limit is 4 GiB)",
        body.len()
    ))
}

fn run<T: DeserializeOwned, C: Config>(body: &[u8], c: C) -> Decoded<T> {
    bincode::serde::decode_from_slice(body, c)
}
