//! The boundary: one guard that every export runs inside, the per-thread error message, and the
//! checked conversions from C arguments.
//!
//! Every raw pointer the C caller hands us is turned into a Rust reference, slice or string here,
//! after a NULL and length check, so the exports themselves contain no `unsafe` except where they
//! take ownership of a handle back (`Box::from_raw`).

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use postbox::{Error, ErrorKind};

use crate::status::*;

/// Why a call failed: the status code returned to C and the text kept for
/// `postbox_last_error_message`.
#[derive(Debug)]
pub struct Failure {
    pub code: c_int,
    pub message: String,
    /// The operating system's error number behind an I/O failure, else 0.
    pub os_error: c_int,
}

impl Failure {
    pub fn new(code: c_int, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            os_error: 0,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(POSTBOX_INVALID_ARGUMENT, message)
    }

    pub fn null(what: &str) -> Failure {
        Failure::invalid(format!("{what} must not be NULL"))
    }

    /// `POSTBOX_UNSUPPORTED`: `what` is the cargo feature `feature`, which this library was
    /// built without; the message gives the build command that adds it.
    #[cfg(not(all(feature = "admin", feature = "bridge")))]
    pub fn not_built(what: &str, feature: &str) -> Failure {
        Failure::from(Error::NotBuilt {
            what: what.to_owned(),
            feature: feature.to_owned(),
            how: format!(
                "build libpostbox with it: `cargo cbuild -p postbox-ffi --release --features \
                 {feature}` (or `cargo build -p postbox-ffi --release --features {feature}`)"
            ),
        })
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure {
            os_error: e.os_error().unwrap_or(0),
            ..Failure::new(status_of(e.kind()), e.to_string())
        }
    }
}

/// `ErrorKind` → status code. The numbers are the same by contract (see `status.rs`); the match
/// exists because a `#[non_exhaustive]` enum of another crate cannot be cast with `as`.
pub fn status_of(kind: ErrorKind) -> c_int {
    match kind {
        ErrorKind::Timeout => POSTBOX_TIMEOUT,
        ErrorKind::LockLost => POSTBOX_LOCK_LOST,
        ErrorKind::QueueFull => POSTBOX_QUEUE_FULL,
        ErrorKind::TooLarge => POSTBOX_TOO_LARGE,
        ErrorKind::NotFound => POSTBOX_NOT_FOUND,
        ErrorKind::InvalidArgument => POSTBOX_INVALID_ARGUMENT,
        ErrorKind::Corrupted => POSTBOX_CORRUPTED,
        ErrorKind::Io => POSTBOX_IO,
        ErrorKind::Closed => POSTBOX_CLOSED,
        ErrorKind::Panic => POSTBOX_PANIC,
        ErrorKind::NotAStore => POSTBOX_NOT_A_STORE,
        ErrorKind::IncompatibleVersion => POSTBOX_INCOMPATIBLE_VERSION,
        ErrorKind::AlreadyOpen => POSTBOX_ALREADY_OPEN,
        ErrorKind::OutcomeUnknown => POSTBOX_OUTCOME_UNKNOWN,
        ErrorKind::Config => POSTBOX_CONFIG,
        ErrorKind::StorageFull => POSTBOX_STORAGE_FULL,
        ErrorKind::Codec => POSTBOX_CODEC,
        ErrorKind::QueueNotFound => POSTBOX_QUEUE_NOT_FOUND,
        ErrorKind::Forked => POSTBOX_FORKED,
        ErrorKind::Conflict => POSTBOX_CONFLICT,
        ErrorKind::InUse => POSTBOX_IN_USE,
        ErrorKind::Unsupported => POSTBOX_UNSUPPORTED,
        // A kind added to the engine without a C code is a bug of this binding; the test
        // `every_error_kind_has_its_own_status` catches it before a release.
        _ => POSTBOX_PANIC,
    }
}

pub type Outcome<T> = Result<T, Failure>;

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
    static LAST_OS_ERROR: std::cell::Cell<c_int> = const { std::cell::Cell::new(0) };
}

fn set_last_error(message: String, os_error: c_int) {
    // An interior NUL would truncate the C string; replace it rather than lose the message.
    let text = CString::new(message.replace('\0', "\u{FFFD}")).unwrap_or_default();
    LAST_ERROR.with(|slot| *slot.borrow_mut() = Some(text));
    LAST_OS_ERROR.with(|slot| slot.set(os_error));
}

/// The value behind `postbox_last_os_error`.
pub fn last_os_error() -> c_int {
    LAST_OS_ERROR.with(std::cell::Cell::get)
}

/// The pointer behind `postbox_last_error_message`: valid until this thread's next failing call.
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|slot| match &*slot.borrow() {
        Some(text) => text.as_ptr(),
        None => c"".as_ptr(),
    })
}

/// What an export returns when its body fails or panics.
pub trait FfiReturn {
    fn on_failure(code: c_int) -> Self;
}

impl FfiReturn for c_int {
    fn on_failure(code: c_int) -> c_int {
        code
    }
}

impl FfiReturn for () {
    fn on_failure(_: c_int) {}
}

impl FfiReturn for u64 {
    fn on_failure(_: c_int) -> u64 {
        0
    }
}

impl FfiReturn for u32 {
    fn on_failure(_: c_int) -> u32 {
        0
    }
}

impl FfiReturn for u16 {
    fn on_failure(_: c_int) -> u16 {
        0
    }
}

impl FfiReturn for u8 {
    fn on_failure(_: c_int) -> u8 {
        0
    }
}

impl FfiReturn for usize {
    fn on_failure(_: c_int) -> usize {
        0
    }
}

impl FfiReturn for bool {
    fn on_failure(_: c_int) -> bool {
        false
    }
}

impl FfiReturn for *const c_char {
    fn on_failure(_: c_int) -> *const c_char {
        std::ptr::null()
    }
}

/// Runs the body of an export: a failure becomes its status code (and this thread's error
/// message), a panic becomes `POSTBOX_PANIC` instead of unwinding into C.
pub fn guard<T: FfiReturn>(body: impl FnOnce() -> Outcome<T>) -> T {
    // Advice in error messages names C's spelling (`multi_process = 1`). C has no call that
    // comes first, so every call says it: one relaxed store.
    postbox::binding::set_language(postbox::binding::Language::C);
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(failure)) => {
            set_last_error(failure.message, failure.os_error);
            T::on_failure(failure.code)
        }
        Err(payload) => {
            let text = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            // Dropping the payload could itself panic (a payload with a panicking Drop); forget
            // it instead, a tiny leak on a path that is already a bug.
            std::mem::forget(payload);
            set_last_error(format!("internal error (caught panic): {text}"), 0);
            T::on_failure(POSTBOX_PANIC)
        }
    }
}

/// A shared reference to a handle or struct the caller passed in.
pub fn arg_ref<'a, T>(ptr: *const T, what: &str) -> Outcome<&'a T> {
    // SAFETY: the header requires every non-NULL pointer to point to a live, properly aligned
    // object of this type for the duration of the call; NULL is rejected by `as_ref`.
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::null(what))
}

/// A NUL-terminated UTF-8 string argument.
pub fn arg_str<'a>(ptr: *const c_char, what: &str) -> Outcome<&'a str> {
    if ptr.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-NULL, and the header requires a NUL-terminated string that stays valid for
    // the duration of the call.
    let c = unsafe { CStr::from_ptr(ptr) };
    c.to_str()
        .map_err(|_| Failure::invalid(format!("{what} is not valid UTF-8")))
}

/// An optional NUL-terminated UTF-8 string argument (NULL means absent).
pub fn arg_opt_str<'a>(ptr: *const c_char, what: &str) -> Outcome<Option<&'a str>> {
    if ptr.is_null() {
        Ok(None)
    } else {
        arg_str(ptr, what).map(Some)
    }
}

/// A `(pointer, length)` buffer; NULL is accepted only with a length of 0.
pub fn arg_slice<'a, T>(ptr: *const T, len: usize, what: &str) -> Outcome<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Failure::invalid(format!(
            "{what} is NULL but its length is {len}"
        )));
    }
    if len
        .checked_mul(size_of::<T>().max(1))
        .is_none_or(|n| n > isize::MAX as usize)
    {
        return Err(Failure::invalid(format!(
            "{what}: length {len} is too large"
        )));
    }
    // SAFETY: non-NULL, the byte size fits in isize, and the header requires `len` readable
    // elements that stay valid and unmodified for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A caller-provided array of `len` writable elements.
pub fn arg_slice_mut<'a, T>(ptr: *mut T, len: usize, what: &str) -> Outcome<&'a mut [T]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Failure::invalid(format!(
            "{what} is NULL but its length is {len}"
        )));
    }
    if len
        .checked_mul(size_of::<T>().max(1))
        .is_none_or(|n| n > isize::MAX as usize)
    {
        return Err(Failure::invalid(format!(
            "{what}: length {len} is too large"
        )));
    }
    // SAFETY: as `arg_slice`, and the header requires the array to be writable and not aliased
    // during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// An out-parameter: checked up front (before any work is done), written only on success.
pub struct Out<T>(*mut T);

impl<T> Out<T> {
    /// A required out-pointer.
    pub fn required(ptr: *mut T, what: &str) -> Outcome<Out<T>> {
        if ptr.is_null() {
            Err(Failure::null(what))
        } else {
            Ok(Out(ptr))
        }
    }

    /// An out-pointer the caller may pass as NULL when it does not want the value.
    pub fn optional(ptr: *mut T) -> Out<T> {
        Out(ptr)
    }

    pub fn write(self, value: T) {
        if !self.0.is_null() {
            // SAFETY: non-NULL, and the header requires out-pointers to point to writable,
            // aligned storage for a `T`. `write` does not drop the (possibly uninitialised)
            // previous contents.
            unsafe { self.0.write(value) }
        }
    }
}

/// Reads a versioned options struct whose first field is its `struct_size`: a caller built
/// against an older header passes a shorter struct, whose missing fields keep their defaults
/// (the all-zero value); a caller built against a newer header is rejected.
///
/// `T` must be `repr(C)`, start with a `u32` size, and be valid when all-zero or partially
/// overwritten with caller bytes (integers, bools the caller set, and pointers only).
pub fn read_versioned<T: Copy + Default>(
    ptr: *const T,
    min_size: usize,
    what: &str,
) -> Outcome<Option<T>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL; every version of the struct starts with a u32 `struct_size`, which the
    // header requires the caller to set.
    let declared = unsafe { ptr.cast::<u32>().read_unaligned() } as usize;
    let ours = size_of::<T>();
    if declared < min_size || declared > ours {
        return Err(Failure::invalid(format!(
            "{what}.struct_size is {declared}; this library accepts {min_size} to {ours} (set it to sizeof the struct, or use the _init function)"
        )));
    }
    let mut value = T::default();
    // SAFETY: the caller's struct has at least `declared` readable bytes (it says so in its
    // size field); our value has `ours >= declared` bytes; they do not overlap. The fields are
    // plain data for which any caller-written bytes are valid (see the doc of this function).
    unsafe {
        std::ptr::copy_nonoverlapping(
            ptr.cast::<u8>(),
            (&mut value as *mut T).cast::<u8>(),
            declared,
        );
    }
    Ok(Some(value))
}

/// A caller's versioned struct to fill (its first field, `struct_size`, set by the caller),
/// checked up front and written only on success, like `Out`.
pub struct VersionedOut<T> {
    ptr: *mut T,
    declared: usize,
}

impl<T: Copy> VersionedOut<T> {
    /// Checks `ptr` and its `struct_size` (between `min_size`, the first version's size, and
    /// ours).
    pub fn required(ptr: *mut T, min_size: usize, what: &str) -> Outcome<VersionedOut<T>> {
        if ptr.is_null() {
            return Err(Failure::null(what));
        }
        // SAFETY: non-NULL; every version of the struct starts with a u32 `struct_size`, which
        // the header requires the caller to set.
        let declared = unsafe { ptr.cast::<u32>().read_unaligned() } as usize;
        let ours = size_of::<T>();
        if declared < min_size || declared > ours {
            return Err(Failure::invalid(format!(
                "{what}->struct_size is {declared}; this library accepts {min_size} to {ours} (set it to sizeof the struct)"
            )));
        }
        Ok(VersionedOut { ptr, declared })
    }

    /// Writes `value` (whose `struct_size` field must hold `size_of::<T>()`): the whole struct
    /// for a caller of this version, the first `struct_size` bytes for an older one (the
    /// fields its header knows; nothing past them is written). `T` must hold no padding
    /// (every version's struct spells its padding as `reserved` fields).
    pub fn write(self, value: T) {
        if self.declared == size_of::<T>() {
            // SAFETY: the caller's struct is this version (it says so in `struct_size`): the
            // header requires it to be writable and aligned.
            unsafe { self.ptr.write(value) }
        } else {
            // SAFETY: the caller's struct has `declared` writable bytes (it says so in its size
            // field); `value` has `size_of::<T>() > declared` bytes, all initialised fields
            // (no padding, per this function's contract); source and destination do not
            // overlap. The size field is then put back to what the caller declared.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&value as *const T).cast::<u8>(),
                    self.ptr.cast::<u8>(),
                    self.declared,
                );
                self.ptr.cast::<u32>().write_unaligned(self.declared as u32);
            }
        }
    }
}

/// Takes back ownership of a handle that postbox boxed and gave to C; `None` for NULL.
///
/// The header states that a handle is freed exactly once and not used by another thread
/// meanwhile; that is the caller's half of the contract this relies on.
pub(crate) fn take_box<T>(ptr: *mut T) -> Option<Box<T>> {
    if ptr.is_null() {
        None
    } else {
        // SAFETY: non-NULL, created by `Box::into_raw` in this crate (handles are only ever
        // made that way), and per the header not yet freed nor in use by another thread.
        Some(unsafe { Box::from_raw(ptr) })
    }
}

/// `count` progress keys given as an array of NUL-terminated UTF-8 strings (the array may be
/// NULL when `count` is 0).
pub(crate) fn progress_keys(keys: *const *const c_char, count: usize) -> Outcome<Vec<String>> {
    arg_slice(keys, count, "keys")?
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            arg_str(k, "key")
                .map(str::to_owned)
                .map_err(|f| Failure::invalid(format!("keys[{i}]: {}", f.message)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_postbox_panic_and_a_message() {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {})); // keep the test output quiet
        let status: c_int = guard(|| -> Outcome<c_int> { panic!("boom {}", 42) });
        let nothing: u64 = guard(|| -> Outcome<u64> { panic!("static boom") });
        std::panic::set_hook(hook);
        assert_eq!(status, POSTBOX_PANIC);
        assert_eq!(nothing, 0);
        // SAFETY: last_error_ptr returns a NUL-terminated string owned by this thread.
        let text = unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_str()
            .unwrap();
        assert!(text.contains("static boom"), "{text}");
    }

    #[test]
    fn null_and_lengths_are_rejected_before_any_work() {
        assert!(arg_ref::<u8>(std::ptr::null(), "x").is_err());
        assert!(arg_slice::<u8>(std::ptr::null(), 3, "x").is_err());
        assert_eq!(arg_slice::<u8>(std::ptr::null(), 0, "x").unwrap().len(), 0);
        let big = [0u64; 1];
        assert!(arg_slice(big.as_ptr(), usize::MAX, "x").is_err());
        let failure = Out::<u8>::required(std::ptr::null_mut(), "out")
            .err()
            .unwrap();
        assert_eq!(failure.code, POSTBOX_INVALID_ARGUMENT);
    }
}
