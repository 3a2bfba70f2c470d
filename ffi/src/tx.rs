//! `postbox_tx`: receives and sends that commit together or not at all.

use std::ffi::{c_char, c_int};

use postbox::sync::Mutex;
use postbox::{MessageId, Transaction};

use crate::guard::progress_keys;
use crate::guard::{Failure, Out, Outcome, arg_ref, guard, take_box};
use crate::handle::{Handle, live};
use crate::message::postbox_message;
use crate::status::POSTBOX_OK;
use crate::store::{postbox_store, postbox_strings};
use crate::{StoreTag, unix_ms};

/// A transaction. Begun with `postbox_tx_begin`; pass it to `postbox_send`,
/// `postbox_send_batch` and `postbox_receive` (for queues of the same store); end it with
/// `postbox_tx_commit` or `postbox_tx_abort`, both of which free the handle. There is no other
/// way to free it: every transaction must be committed or aborted.
///
/// Thread-safe in the sense that concurrent calls are serialised (a receive waiting inside the
/// transaction blocks other calls on it), but a transaction is meant for one thread.
pub struct postbox_tx {
    pub(crate) tx: Mutex<Option<Transaction>>,
    pub(crate) tag: StoreTag,
    /// Lent to a transactional processor callback: the processor commits it, not the caller.
    pub(crate) lent: bool,
}

impl Handle for postbox_tx {
    const ARG: &'static str = "tx";

    fn tag(&self) -> StoreTag {
        self.tag
    }
}

/// Refuses a processor's lent transaction.
fn refuse_lent(tx: *mut postbox_tx) -> Outcome<()> {
    let t = arg_ref(tx.cast_const(), "tx")?;
    if t.lent {
        return Err(Failure::invalid(
            "this transaction belongs to a processor, which commits or aborts it when the callback returns",
        ));
    }
    Ok(())
}

/// Runs `f` on the open transaction behind `tx`, checking that it belongs to the store `tag`.
pub(crate) fn with_tx<T>(
    tx: *mut postbox_tx,
    tag: StoreTag,
    f: impl FnOnce(&mut Transaction) -> Outcome<T>,
) -> Outcome<T> {
    let t = live(tx.cast_const())?;
    if t.tag != tag {
        return Err(Failure::invalid(
            "the transaction belongs to another store than the queue",
        ));
    }
    let mut slot = t.tx.lock();
    let inner = slot
        .as_mut()
        .ok_or_else(|| Failure::invalid("the transaction is already finished"))?;
    f(inner)
}

/// Frees the handle and returns its transaction (`None` if NULL or already finished).
fn take(tx: *mut postbox_tx) -> Option<Transaction> {
    take_box(tx).and_then(|handle| handle.tx.into_inner())
}

/// Begins a transaction on `store`. `tx_out` receives the handle; the caller must end it with
/// `postbox_tx_commit` or `postbox_tx_abort`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_CLOSED` (the store was closed);
/// `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_tx_begin(
    store: *mut postbox_store,
    tx_out: *mut *mut postbox_tx,
) -> c_int {
    guard(|| {
        let s = arg_ref(store, "store")?;
        let out = Out::required(tx_out, "tx_out")?;
        s.live()?;
        let t = s.store.try_begin()?;
        out.write(Box::into_raw(Box::new(postbox_tx {
            tx: Mutex::new(Some(t)),
            tag: s.tag,
            lent: false,
        })));
        Ok(POSTBOX_OK)
    })
}

/// Enlists a message received with peek-lock (outside the transaction): the commit completes it,
/// an abort returns it to its queue. The message handle no longer holds the lock afterwards
/// (it stays readable and must still be freed).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, a message not held, of another store, or a
/// finished transaction: the message handle is left as it was); `POSTBOX_CLOSED` (the message
/// is let go: closing the store released its lock); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_tx_complete(tx: *mut postbox_tx, message: *mut postbox_message) -> c_int {
    guard(|| {
        let m = arg_ref(message.cast_const(), "message")?;
        with_tx(tx, m.tag, |t| {
            t.complete(m.take_received()?)?;
            Ok(())
        })?;
        Ok(POSTBOX_OK)
    })
}

/// Extends the lock on message `message_id`, received into (or enlisted in) `tx`, by its
/// queue's current lock duration from now, so a long transaction keeps what it received.
/// `locked_until_ms_out` may be NULL; on success it receives the new expiry (ms since the Unix
/// epoch), which `postbox_tx_locked_until_ms` reports from then on.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the transaction holds no such message);
/// `POSTBOX_LOCK_LOST` (the lock already expired: the commit will fail);
/// `POSTBOX_INVALID_ARGUMENT` (NULL, or a finished transaction); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_tx_renew_lock(
    tx: *mut postbox_tx,
    message_id: u64,
    locked_until_ms_out: *mut u64,
) -> c_int {
    guard(|| {
        let out = Out::optional(locked_until_ms_out);
        let tag = arg_ref(tx.cast_const(), "tx")?.tag;
        let until = with_tx(tx, tag, |t| Ok(t.renew_lock(MessageId(message_id))?))?;
        out.write(unix_ms(until));
        Ok(POSTBOX_OK)
    })
}

/// Records progress keys on message `message_id`, received into (or enlisted in) `tx`, as
/// `postbox_message_mark_done` does on a message a handle holds (work items done, e.g.
/// "recipient 17 notified"); renews its lock in the same write. The keys are written at once,
/// under the transaction's lock, not at commit: they record work done outside the transaction
/// (a notification sent, a file written), which an abort cannot take back, so they survive an
/// abort, a lost lock or a crash — the redelivery reads them (`postbox_tx_done_keys`,
/// `postbox_message_done_keys`) and skips that work. Work done through the transaction (its
/// sends) needs no checkpoint: it commits or vanishes with it. The commit that completes the
/// message removes its keys. `keys` is an array of `count` NUL-terminated UTF-8 strings, each 1
/// to 1024 bytes; `count` may be 0 (only the lock is renewed). `locked_until_ms_out` may be
/// NULL; on success it receives the new expiry (ms since the Unix epoch), which
/// `postbox_tx_locked_until_ms` reports from then on. (A transactional processor callback's own
/// message is the processor's, not `tx`'s: use `postbox_processor_mark_done` for it.)
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the transaction holds no such message);
/// `POSTBOX_LOCK_LOST` (the lock already expired: nothing recorded, the commit will fail);
/// `POSTBOX_INVALID_ARGUMENT` (NULL, a finished transaction, NULL `keys` with a count, a NULL,
/// empty, over-long or non-UTF-8 key); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_tx_mark_done(
    tx: *mut postbox_tx,
    message_id: u64,
    keys: *const *const c_char,
    count: usize,
    locked_until_ms_out: *mut u64,
) -> c_int {
    guard(|| {
        let out = Out::optional(locked_until_ms_out);
        let keys = progress_keys(keys, count)?;
        let tag = arg_ref(tx.cast_const(), "tx")?.tag;
        let until = with_tx(tx, tag, |t| Ok(t.mark_done(MessageId(message_id), keys)?))?;
        out.write(unix_ms(until));
        Ok(POSTBOX_OK)
    })
}

/// The progress keys recorded on message `message_id`, held by `tx` (by `postbox_tx_mark_done`
/// or any receiver's mark-done, in this delivery or earlier ones), read in one lookup.
/// `keys_out` receives a list, sorted bytewise, that the caller reads with
/// `postbox_strings_count` / `postbox_strings_get` and frees with `postbox_strings_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the transaction holds no such message);
/// `POSTBOX_INVALID_ARGUMENT` (NULL, a finished transaction); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_tx_done_keys(
    tx: *mut postbox_tx,
    message_id: u64,
    keys_out: *mut *mut postbox_strings,
) -> c_int {
    guard(|| {
        let out = Out::required(keys_out, "keys_out")?;
        let tag = arg_ref(tx.cast_const(), "tx")?.tag;
        let keys = with_tx(tx, tag, |t| Ok(t.done_keys(MessageId(message_id))?))?;
        out.write(postbox_strings::boxed(keys.into_iter().collect())?);
        Ok(POSTBOX_OK)
    })
}

/// When the lock on message `message_id`, held by `tx`, expires unless renewed (ms since the
/// Unix epoch); 0 when `tx` is NULL, finished, or holds no such message.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_tx_locked_until_ms(tx: *const postbox_tx, message_id: u64) -> u64 {
    guard(|| {
        let t = arg_ref(tx, "tx")?;
        if t.tag.is_forked() {
            return Ok(0);
        }
        let slot = t.tx.lock();
        Ok(slot
            .as_ref()
            .and_then(|t| t.locked_until(MessageId(message_id)))
            .map_or(0, unix_ms))
    })
}

/// Commits the transaction: every receive is completed and every send stored, atomically and
/// durably, or nothing is. Always frees `tx`, whatever the outcome; on failure the received
/// messages have been returned to their queues.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (a received message's lock expired: nothing applied);
/// `POSTBOX_CONFLICT` (a row that `postbox_table_increment` or `postbox_table_put_if` read in
/// `tx` was changed by another commit since: nothing applied, run the transaction again);
/// `POSTBOX_QUEUE_FULL` or `POSTBOX_QUEUE_NOT_FOUND` (a send's queue is full or was deleted:
/// nothing applied); `POSTBOX_INVALID_ARGUMENT` (NULL, a processor's transaction, or a piece
/// of a job sealed since `postbox_job_send`: nothing applied); `POSTBOX_NOT_FOUND` (a piece of a
/// job deleted since: nothing applied); `POSTBOX_CLOSED`; `POSTBOX_FORKED` (the handle is freed; nothing is written, the parent's
/// locks stay with the parent); `POSTBOX_STORAGE_FULL` (nothing applied);
/// `POSTBOX_OUTCOME_UNKNOWN` (applied or not, it cannot be known); other storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_tx_commit(tx: *mut postbox_tx) -> c_int {
    guard(|| {
        refuse_lent(tx)?;
        // In a forked child the handle is freed without its lock being touched, and the
        // transaction's drop writes nothing (the engine refuses it), so the parent keeps its
        // locks.
        let process = arg_ref(tx.cast_const(), "tx")?.live().map(|_| ());
        if let Some(t) = take(tx) {
            process?;
            t.commit()?;
        }
        Ok(POSTBOX_OK)
    })
}

/// Aborts the transaction: sends are discarded and received messages return to their queues
/// (their delivery counts stay incremented). Always frees `tx`. NULL is a no-op returning
/// `POSTBOX_OK`, so it can serve as a cleanup call.
///
/// # Returns
/// `POSTBOX_OK`; storage errors of the release (`POSTBOX_CLOSED`, `POSTBOX_IO`, …): the handle
/// is freed anyway and the locks run out on their own; `POSTBOX_FORKED` (freed, nothing
/// written); `POSTBOX_INVALID_ARGUMENT` (a processor's transaction).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_tx_abort(tx: *mut postbox_tx) -> c_int {
    guard(|| {
        if tx.is_null() {
            return Ok(POSTBOX_OK);
        }
        refuse_lent(tx)?;
        let process = arg_ref(tx.cast_const(), "tx")?.live().map(|_| ());
        if let Some(t) = take(tx) {
            process?;
            t.abort()?;
        }
        Ok(POSTBOX_OK)
    })
}
