//! The typed-body envelope (docs/typed-bodies.md): a six-byte header in front of an encoded
//! value, so that a body written by one language says how another must read it.
//!
//! ```text
//! offset 0..4  magic   FF 50 42 54   (0xFF, then "PBT")
//! offset 4     version 1
//! offset 5     codec   1 JSON (UTF-8), 2 bincode 2 (Rust), 3 pickle (Python), 128-255 user
//! offset 6..   payload, as the codec wrote it
//! ```
//!
//! The magic starts with 0xFF, which no UTF-8 text contains and no bincode varint starts with,
//! so text bodies and most bincode bodies written before the envelope existed cannot be
//! mistaken for an envelope; a body without the magic is read as such a legacy bincode body.
//!
//! A leaf below the API: it knows bytes and the two codecs Rust ships (bincode through
//! `body_codec`, JSON here), nothing of queues.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::body_codec;
use crate::error::{Error, Result};

/// The first four bytes of every typed body: `0xFF` then `"PBT"`.
pub const TYPED_BODY_MAGIC: [u8; 4] = [0xFF, b'P', b'B', b'T'];
/// The envelope format this version of postbox writes and the only one it reads.
pub const TYPED_BODY_VERSION: u8 = 1;
/// Bytes before the payload: magic (4), version (1), codec id (1).
pub const TYPED_BODY_HEADER_LEN: usize = 6;
/// Codec id of JSON text in UTF-8 (RFC 8259), readable in every language.
pub const CODEC_JSON: u8 = 1;
/// Codec id of bincode 2 with its standard configuration (little-endian, variable-length
/// integers): Rust only.
pub const CODEC_BINCODE: u8 = 2;
/// Codec id of Python's pickle: Python only, and only where the reader opted in.
pub const CODEC_PICKLE: u8 = 3;
/// The first codec id left to applications (128 to 255); 0 and 4 to 127 are reserved.
pub const FIRST_USER_CODEC: u8 = 128;

/// Whether `codec` may appear in an envelope: one of the assigned ids or a user id.
fn is_assigned(codec: u8) -> bool {
    matches!(codec, CODEC_JSON | CODEC_BINCODE | CODEC_PICKLE) || codec >= FIRST_USER_CODEC
}

/// A short name of a codec id for error texts.
pub(crate) fn codec_name(codec: u8) -> &'static str {
    match codec {
        CODEC_JSON => "JSON",
        CODEC_BINCODE => "bincode",
        CODEC_PICKLE => "pickle",
        c if c >= FIRST_USER_CODEC => "a user codec",
        _ => "reserved",
    }
}

/// Why bytes are not a typed body this version can read, or why one cannot be written.
///
/// Converts into [`Error::Codec`] (kind [`ErrorKind::Codec`](crate::ErrorKind::Codec), status
/// `POSTBOX_CODEC` in C, `postbox.CodecError` in Python) with `?`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TypedBodyError {
    /// The body does not start with [`TYPED_BODY_MAGIC`].
    #[error("the body is not a typed body (it does not start with the typed-body magic)")]
    NotTypedBody,
    /// The body starts with the magic but ends inside the header.
    #[error("the typed body is truncated: {len} bytes, shorter than its 6-byte header")]
    Truncated {
        /// The body's length.
        len: usize,
    },
    /// The header names an envelope version this postbox does not read.
    #[error(
        "typed-body format version {0} is not supported (this postbox reads version {TYPED_BODY_VERSION})"
    )]
    UnsupportedVersion(u8),
    /// The codec id is reserved (0, or 4 to 127): no codec has it.
    #[error("codec id {0} is reserved (assigned: 1 JSON, 2 bincode, 3 pickle; 128-255 user)")]
    ReservedCodec(u8),
    /// The codec is valid but not one this reader decodes.
    #[error("codec {0} ({name}) is not one this reader decodes", name = codec_name(*.0))]
    UnsupportedCodec(u8),
    /// The codec is valid but not the one the reader asked for.
    #[error(
        "the body is encoded with codec {found} ({}), not with codec {expected} ({})",
        codec_name(*.found),
        codec_name(*.expected)
    )]
    WrongCodec {
        /// The codec the reader asked for.
        expected: u8,
        /// The codec in the body's header.
        found: u8,
    },
}

impl From<TypedBodyError> for Error {
    fn from(e: TypedBodyError) -> Error {
        Error::Codec(e.to_string())
    }
}

/// A typed body taken apart without copying: its codec id and a view of its payload.
///
/// ```
/// use postbox::{CODEC_JSON, TypedBody, wrap_typed_body};
///
/// let body = wrap_typed_body(CODEC_JSON, br#"{"id":42}"#)?;
/// let typed = TypedBody::parse(&body)?;
/// assert_eq!((typed.codec(), typed.payload()), (CODEC_JSON, &br#"{"id":42}"#[..]));
/// # Ok::<(), postbox::TypedBodyError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TypedBody<'a> {
    codec: u8,
    payload: &'a [u8],
}

impl fmt::Debug for TypedBody<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedBody")
            .field("codec", &self.codec)
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

impl<'a> TypedBody<'a> {
    /// Reads the header of `body`; the payload borrows from `body`.
    ///
    /// # Errors
    ///
    /// [`TypedBodyError::NotTypedBody`] without the magic, [`TypedBodyError::Truncated`] when
    /// the body ends inside the header, [`TypedBodyError::UnsupportedVersion`] for a version
    /// other than [`TYPED_BODY_VERSION`], [`TypedBodyError::ReservedCodec`] for codec 0 or 4 to
    /// 127. An empty payload is valid here: whether it decodes is the codec's business.
    pub fn parse(body: &'a [u8]) -> std::result::Result<TypedBody<'a>, TypedBodyError> {
        let magic = &TYPED_BODY_MAGIC[..];
        if body.len() < TYPED_BODY_HEADER_LEN {
            // A prefix of the header is a truncated envelope only if what is there matches.
            let n = body.len().min(magic.len());
            return Err(if n == magic.len() && body[..n] == magic[..n] {
                TypedBodyError::Truncated { len: body.len() }
            } else {
                TypedBodyError::NotTypedBody
            });
        }
        if body[..4] != *magic {
            return Err(TypedBodyError::NotTypedBody);
        }
        if body[4] != TYPED_BODY_VERSION {
            return Err(TypedBodyError::UnsupportedVersion(body[4]));
        }
        let codec = body[5];
        if !is_assigned(codec) {
            return Err(TypedBodyError::ReservedCodec(codec));
        }
        Ok(TypedBody {
            codec,
            payload: &body[TYPED_BODY_HEADER_LEN..],
        })
    }

    /// Like [`parse`](Self::parse), and the codec must be `expected`.
    ///
    /// # Errors
    ///
    /// As [`parse`](Self::parse); [`TypedBodyError::ReservedCodec`] when `expected` itself is
    /// reserved; [`TypedBodyError::WrongCodec`] for another valid codec.
    pub fn parse_as(
        body: &'a [u8],
        expected: u8,
    ) -> std::result::Result<TypedBody<'a>, TypedBodyError> {
        if !is_assigned(expected) {
            return Err(TypedBodyError::ReservedCodec(expected));
        }
        let typed = TypedBody::parse(body)?;
        if typed.codec != expected {
            return Err(TypedBodyError::WrongCodec {
                expected,
                found: typed.codec,
            });
        }
        Ok(typed)
    }

    /// The codec id from the header.
    pub fn codec(&self) -> u8 {
        self.codec
    }

    /// The encoded value after the header.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// Whether `body` starts with [`TYPED_BODY_MAGIC`] (and so is read as an envelope, valid or
/// not, rather than as a legacy bincode body).
pub fn is_typed_body(body: &[u8]) -> bool {
    body.starts_with(&TYPED_BODY_MAGIC)
}

/// A new body: the envelope header for `codec` followed by a copy of `payload`.
///
/// # Errors
///
/// [`TypedBodyError::ReservedCodec`] for codec 0 or 4 to 127.
pub fn wrap_typed_body(codec: u8, payload: &[u8]) -> std::result::Result<Vec<u8>, TypedBodyError> {
    let mut body = header(codec)?;
    body.extend_from_slice(payload);
    Ok(body)
}

/// A buffer holding just the header, with room for a payload of typical size to follow.
fn header(codec: u8) -> std::result::Result<Vec<u8>, TypedBodyError> {
    if !is_assigned(codec) {
        return Err(TypedBodyError::ReservedCodec(codec));
    }
    let mut body = Vec::with_capacity(64);
    body.extend_from_slice(&TYPED_BODY_MAGIC);
    body.push(TYPED_BODY_VERSION);
    body.push(codec);
    Ok(body)
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Bincode {}
    impl Sealed for super::Json {}
}

/// How a [`TypedQueue`](crate::TypedQueue) encodes the values it sends: [`Bincode`] (the
/// default) or [`Json`]. Sealed: these are the codecs Rust ships. Whatever the codec of the
/// sending side, a typed receive decodes every body Rust can read (see
/// [`decode_typed_body`]).
pub trait BodyCodec: sealed::Sealed + Send + Sync + 'static {
    /// The codec id written in the envelope header.
    const ID: u8;

    /// Encodes `value` as a whole typed body: the envelope header, then the payload.
    ///
    /// # Errors
    ///
    /// [`Error::Codec`] when the value cannot be encoded (a `Serialize` implementation that
    /// fails; for JSON also a map whose keys are not strings or numbers).
    fn encode_body<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>>;
}

/// bincode 2, standard configuration, in an envelope with codec [`CODEC_BINCODE`]: compact
/// and fast, readable by Rust only. The codec of [`Queue::typed`](crate::Queue::typed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bincode;

/// JSON (UTF-8) in an envelope with codec [`CODEC_JSON`]: readable by C and Python programs
/// too. The codec of [`Queue::typed_json`](crate::Queue::typed_json).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Json;

impl BodyCodec for Bincode {
    const ID: u8 = CODEC_BINCODE;

    fn encode_body<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
        let mut body = header(Self::ID)?;
        body.extend_from_slice(&body_codec::encode(value)?);
        Ok(body)
    }
}

impl BodyCodec for Json {
    const ID: u8 = CODEC_JSON;

    fn encode_body<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
        let mut body = header(Self::ID)?;
        serde_json::to_writer(&mut body, value)
            .map_err(|e| Error::Codec(format!("JSON encoding failed: {e}")))?;
        Ok(body)
    }
}

/// Decodes a body written by any Rust typed queue: an envelope of codec [`CODEC_JSON`] or
/// [`CODEC_BINCODE`], or — without the magic — a legacy bincode body as typed queues wrote
/// before the envelope existed. This is what typed receives and
/// [`ProcessorBuilder::start_typed`](crate::ProcessorBuilder::start_typed) use.
///
/// # Errors
///
/// [`Error::Codec`]: the envelope is refused (see [`TypedBody::parse`]), its codec is not one
/// Rust reads (pickle, user codecs), or the payload is not a valid encoding of `T` (trailing
/// bytes included).
pub fn decode_typed_body<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    if !is_typed_body(body) {
        return body_codec::decode(body);
    }
    let typed = TypedBody::parse(body)?;
    match typed.codec() {
        CODEC_BINCODE => body_codec::decode(typed.payload()),
        CODEC_JSON => serde_json::from_slice(typed.payload())
            .map_err(|e| Error::Codec(format!("JSON decoding failed: {e}"))),
        other => Err(TypedBodyError::UnsupportedCodec(other).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_is_the_documented_one() {
        let body = wrap_typed_body(CODEC_JSON, b"7").unwrap();
        assert_eq!(body, [0xFF, 0x50, 0x42, 0x54, 1, 1, b'7']);
        assert_eq!(Json::encode_body(&7u8).unwrap(), body);
        assert_eq!(
            Bincode::encode_body(&7u8).unwrap(),
            [0xFF, 0x50, 0x42, 0x54, 1, 2, 7]
        );
    }

    #[test]
    fn prefixes_of_the_header_are_truncated_or_not_typed() {
        let body = wrap_typed_body(CODEC_JSON, b"").unwrap();
        for n in 0..TYPED_BODY_HEADER_LEN {
            let want = if n >= 4 {
                TypedBodyError::Truncated { len: n }
            } else {
                TypedBodyError::NotTypedBody
            };
            assert_eq!(TypedBody::parse(&body[..n]), Err(want), "{n}");
        }
        assert_eq!(TypedBody::parse(&body).unwrap().payload(), b"");
    }
}
