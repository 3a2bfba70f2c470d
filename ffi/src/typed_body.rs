//! Typed bodies in C: wrapping a payload in the typed-body envelope (docs/typed-bodies.md),
//! viewing one without copying, and reading the typed body of a received message — which moves
//! a body that is not one to the dead-letter queue (reason `DecodeFailed`), as typed receives do
//! in Rust and Python. The envelope itself is the engine's (`postbox::TypedBody`); this file
//! only checks C arguments and maps its refusals to `POSTBOX_CODEC`.

use std::ffi::c_int;

use postbox::{ErrorKind, REASON_DECODE_FAILED, TypedBody, TypedBodyError};

use crate::guard::{Failure, Out, Outcome, arg_ref, arg_slice, arg_slice_mut, guard};
use crate::handle::Handle;
use crate::message::postbox_message;
use crate::postbox_bytes;
use crate::status::{POSTBOX_CODEC, POSTBOX_OK};

/// The typed-body format version this library writes and the only one it reads.
pub const POSTBOX_TYPED_BODY_VERSION: u8 = 1;
/// Bytes of the typed-body header in front of the payload: the magic `0xFF 'P' 'B' 'T'`, the
/// version, the codec id. A typed body is `POSTBOX_TYPED_BODY_HEADER_LEN + payload_len` bytes.
pub const POSTBOX_TYPED_BODY_HEADER_LEN: usize = 6;
/// Codec id of JSON text in UTF-8: what Rust's `typed_json` queues and Python's default
/// typed queues send, and the codec to use from C.
pub const POSTBOX_CODEC_JSON: u8 = 1;
/// Codec id of bincode 2 (standard configuration), written by Rust's `typed` queues; C has no
/// decoder for it.
pub const POSTBOX_CODEC_BINCODE: u8 = 2;
/// Codec id of Python's pickle (Python only, opt-in there).
pub const POSTBOX_CODEC_PICKLE: u8 = 3;
/// The first codec id left to applications: 128 to 255 are user codecs, which postbox carries
/// but decodes nowhere (the programs that agree on one decode its payload themselves). 0 and 4
/// to 127 are reserved; functions given one return `POSTBOX_INVALID_ARGUMENT`.
pub const POSTBOX_CODEC_USER_FIRST: u8 = 128;

// The header spells these as literals; the build fails if they ever differ from the engine's.
const _: () = {
    assert!(POSTBOX_TYPED_BODY_VERSION == postbox::TYPED_BODY_VERSION);
    assert!(POSTBOX_TYPED_BODY_HEADER_LEN == postbox::TYPED_BODY_HEADER_LEN);
    assert!(POSTBOX_CODEC_JSON == postbox::CODEC_JSON);
    assert!(POSTBOX_CODEC_BINCODE == postbox::CODEC_BINCODE);
    assert!(POSTBOX_CODEC_PICKLE == postbox::CODEC_PICKLE);
    assert!(POSTBOX_CODEC_USER_FIRST == postbox::FIRST_USER_CODEC);
};

/// The envelope header for `codec`, or `POSTBOX_INVALID_ARGUMENT` for a reserved id: a codec
/// the caller names is an argument, unlike the codec found in a body.
fn header(codec: u8, what: &str) -> Outcome<Vec<u8>> {
    postbox::wrap_typed_body(codec, &[]).map_err(|e| Failure::invalid(format!("{what}: {e}")))
}

/// A body the envelope refuses: `POSTBOX_CODEC`, as the engine's `Codec` kind.
fn refused(e: TypedBodyError) -> Failure {
    Failure::new(POSTBOX_CODEC, e.to_string())
}

/// Writes the typed body of `payload` (`payload_len` bytes, e.g. JSON text) encoded with
/// `codec` into `out`: the 6-byte header (`POSTBOX_TYPED_BODY_HEADER_LEN`) followed by the
/// payload. `out_capacity` must be at least `payload_len + POSTBOX_TYPED_BODY_HEADER_LEN`;
/// `out_len` (may be NULL) receives the body's length. Send the result with `postbox_send`.
///
/// `payload` may sit at `out + POSTBOX_TYPED_BODY_HEADER_LEN` already (only the header is
/// written then: build the payload in place, without a copy); otherwise the two buffers must
/// not overlap. `payload` may be NULL when `payload_len` is 0. Pure: touches no store.
///
/// `codec` is `POSTBOX_CODEC_JSON`, `POSTBOX_CODEC_BINCODE`, `POSTBOX_CODEC_PICKLE`, or a user
/// codec from `POSTBOX_CODEC_USER_FIRST` (128) to 255 (docs/typed-bodies.md). postbox decodes
/// no user codec: it carries the id and the payload unchanged, for programs that agree on what
/// the id means (Protobuf, MessagePack, …). A C reader takes the payload out with
/// `postbox_message_typed_body(msg, codec, &payload)` or `postbox_typed_body_view` and decodes
/// it itself; Python reads it through a codec object with that id; Rust's typed receives
/// refuse it as an unsupported codec (`Codec`, dead-lettered `DecodeFailed`).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `out`, a too small `out_capacity`, overlapping
/// buffers, or a reserved `codec`: 0 and 4 to 127).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_typed_body_wrap(
    codec: u8,
    payload: *const u8,
    payload_len: usize,
    out: *mut u8,
    out_capacity: usize,
    out_len: *mut usize,
) -> c_int {
    guard(|| {
        let len_out = Out::optional(out_len);
        let head = header(codec, "codec")?;
        let need = payload_len
            .checked_add(POSTBOX_TYPED_BODY_HEADER_LEN)
            .ok_or_else(|| Failure::invalid("payload_len is too large"))?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        if out_capacity < need {
            return Err(Failure::invalid(format!(
                "out_capacity is {out_capacity}; the typed body needs {need} bytes (payload_len + POSTBOX_TYPED_BODY_HEADER_LEN)"
            )));
        }
        // Addresses only, to decide which slices may exist at once: a payload already in place
        // after the header is never read (so no shared view of bytes we hold mutably), and any
        // other overlap is refused rather than copied into itself.
        let (p, o) = (payload as usize, out as usize);
        let in_place = payload_len > 0 && Some(p) == o.checked_add(POSTBOX_TYPED_BODY_HEADER_LEN);
        if in_place {
            arg_slice_mut(out, POSTBOX_TYPED_BODY_HEADER_LEN, "out")?.copy_from_slice(&head);
        } else {
            let overlaps = payload_len > 0
                && match (p.checked_add(payload_len), o.checked_add(need)) {
                    (Some(p_end), Some(o_end)) => p < o_end && o < p_end,
                    _ => true,
                };
            if overlaps {
                return Err(Failure::invalid(
                    "payload overlaps out (only a payload at out + POSTBOX_TYPED_BODY_HEADER_LEN may)",
                ));
            }
            let src = arg_slice(payload, payload_len, "payload")?;
            let dst = arg_slice_mut(out, need, "out")?;
            dst[..POSTBOX_TYPED_BODY_HEADER_LEN].copy_from_slice(&head);
            dst[POSTBOX_TYPED_BODY_HEADER_LEN..].copy_from_slice(src);
        }
        len_out.write(need);
        Ok(POSTBOX_OK)
    })
}

/// Takes a typed body apart without copying: `codec_out` (may be NULL) receives its codec id,
/// `payload_out` (may be NULL) a view of its payload, which points into `body` and is valid as
/// long as `body` is. `body` may be NULL when `body_len` is 0. Pure: touches no store.
///
/// An empty payload is a valid envelope; whether it decodes is the codec's business.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_CODEC` (not a typed body: no magic, cut inside the header, a format
/// version other than `POSTBOX_TYPED_BODY_VERSION`, or a reserved codec id;
/// `postbox_last_error_message` says which); `POSTBOX_INVALID_ARGUMENT` (NULL `body` with a
/// length).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_typed_body_view(
    body: *const u8,
    body_len: usize,
    codec_out: *mut u8,
    payload_out: *mut postbox_bytes,
) -> c_int {
    guard(|| {
        let body = arg_slice(body, body_len, "body")?;
        let typed = TypedBody::parse(body).map_err(refused)?;
        Out::optional(codec_out).write(typed.codec());
        Out::optional(payload_out).write(postbox_bytes::of(typed.payload()));
        Ok(POSTBOX_OK)
    })
}

/// The payload of a message whose body is a typed body of codec `expected_codec` (e.g.
/// `POSTBOX_CODEC_JSON`), as a view into the message's body (`payload_out`, required; valid
/// until the message is freed).
///
/// A body that is not such a typed body (no envelope, an unknown version, another codec such as
/// the bincode of a Rust `typed` queue) never will be, so instead of returning to the queue for
/// futile retries the message is moved to the dead-letter queue with reason
/// `POSTBOX_REASON_DECODE_FAILED` and the envelope error as description, and the call returns
/// `POSTBOX_CODEC`:
///
/// - a message received with peek-lock is dead-lettered now; the handle is settled (free it);
/// - a message lent to a processor callback is dead-lettered when the callback returns, whatever
///   it returns (as after `postbox_processor_dead_letter`);
/// - a peeked or browsed message, or one received in a transaction, is not moved (the handle
///   holds no lock of its own); `postbox_last_error_message` says so.
///
/// The same applies to a payload the caller then fails to parse: dead-letter it with
/// `postbox_message_dead_letter(msg, POSTBOX_REASON_DECODE_FAILED, why)` (in a callback,
/// `postbox_processor_dead_letter`).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_CODEC` (the body is not a typed body of that codec; moved as above);
/// `POSTBOX_INVALID_ARGUMENT` (NULL `message` or `payload_out`, or a reserved `expected_codec`:
/// nothing is moved); `POSTBOX_FORKED`. When moving the message failed, that failure's status
/// (`POSTBOX_QUEUE_NOT_FOUND`, `POSTBOX_CLOSED`, storage errors) as from
/// `postbox_message_dead_letter`: the handle still holds the lock.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_typed_body(
    message: *const postbox_message,
    expected_codec: u8,
    payload_out: *mut postbox_bytes,
) -> c_int {
    guard(|| {
        let m = arg_ref(message, "message")?;
        let out = Out::required(payload_out, "payload_out")?;
        header(expected_codec, "expected_codec")?;
        let body = m.envelope().body();
        match TypedBody::parse_as(body, expected_codec) {
            Ok(typed) => {
                out.write(postbox_bytes::of(typed.payload()));
                Ok(POSTBOX_OK)
            }
            Err(e) => Err(dead_letter_undecodable(m, &e.to_string())),
        }
    })
}

/// Moves a message whose body did not decode to the dead-letter queue as far as its handle
/// allows; the failure to return says what happened.
fn dead_letter_undecodable(m: &postbox_message, why: &str) -> Failure {
    if let Err(f) = m.live() {
        return f;
    }
    let codec = |outcome: String| Failure::new(POSTBOX_CODEC, format!("{why}; {outcome}"));
    if m.held.is_lent() {
        return match m.held.request_dead_letter(REASON_DECODE_FAILED, why) {
            Ok(()) => codec(format!(
                "the processor moves the message to the dead-letter queue ({REASON_DECODE_FAILED}) when the callback returns"
            )),
            Err(e) => codec(format!("not moved to the dead-letter queue: {e}")),
        };
    }
    if !m.held.is_held() {
        return codec(format!(
            "not moved to the dead-letter queue: the handle holds no lock ({})",
            m.held.state()
        ));
    }
    match m.held.settle("dead-lettered", |r| {
        r.dead_letter(REASON_DECODE_FAILED, why)
    }) {
        Ok(()) => codec(format!(
            "moved to the dead-letter queue ({REASON_DECODE_FAILED})"
        )),
        Err(e) if e.kind() == ErrorKind::LockLost => codec(format!(
            "not moved to the dead-letter queue: the lock was lost ({e})"
        )),
        // Refused without a change (e.g. a message of a dead-letter queue): the body is still
        // what the caller needs to hear about.
        Err(e) if e.kind() == ErrorKind::InvalidArgument => {
            codec(format!("not moved to the dead-letter queue: {e}"))
        }
        Err(e) => {
            let mut f = Failure::from(e);
            f.message = format!(
                "{why}; moving the message to the dead-letter queue failed (the handle keeps its lock): {}",
                f.message
            );
            f
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::POSTBOX_INVALID_ARGUMENT;

    #[test]
    fn wrap_then_view_round_trips_and_in_place_wraps_copy_nothing() {
        let mut out = [0u8; 16];
        let mut len = 0usize;
        let payload = b"{\"a\":1}";
        let rc = postbox_typed_body_wrap(
            POSTBOX_CODEC_JSON,
            payload.as_ptr(),
            payload.len(),
            out.as_mut_ptr(),
            out.len(),
            &mut len,
        );
        assert_eq!((rc, len), (POSTBOX_OK, 13));
        assert_eq!(&out[..13], b"\xFFPBT\x01\x01{\"a\":1}");

        let mut codec = 0u8;
        let mut view = postbox_bytes::ABSENT;
        let rc = postbox_typed_body_view(out.as_ptr(), len, &mut codec, &mut view);
        assert_eq!((rc, codec, view.len), (POSTBOX_OK, POSTBOX_CODEC_JSON, 7));
        assert_eq!(view.data, out[6..].as_ptr());

        let mut buf = *b"......hello";
        let base = buf.as_mut_ptr();
        // SAFETY: offset 6 is inside `buf` (11 bytes).
        let payload = unsafe { base.add(6) }.cast_const();
        let rc = postbox_typed_body_wrap(200, payload, 5, base, buf.len(), std::ptr::null_mut());
        assert_eq!(rc, POSTBOX_OK);
        assert_eq!(&buf, b"\xFFPBT\x01\xC8hello");
        // Any other overlap is refused.
        let rc = postbox_typed_body_wrap(200, base.cast_const(), 5, base, buf.len(), &mut len);
        assert_eq!(rc, POSTBOX_INVALID_ARGUMENT);
    }
}
