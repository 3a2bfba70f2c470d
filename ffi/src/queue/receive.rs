//! Reading and receiving: peek, get, browse, receive (one, by id, by correlation id, batch)
//! and batch completion.

use super::*;

/// Reads the message at the head of the queue (the one a receive would take next) without
/// locking it. `message_out` receives a handle the caller frees with `postbox_message_free`; it
/// cannot be settled.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (nothing receivable: a normal outcome);
/// `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_peek(
    queue: *const postbox_queue,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(message_out, "message_out")?;
        let env = q
            .queue
            .peek()?
            .ok_or_else(|| Failure::new(POSTBOX_NOT_FOUND, "the queue has nothing receivable"))?;
        out.write(
            postbox_message::new(HeldMessage::read(env, MessageState::Active), q.tag).into_raw(),
        );
        Ok(POSTBOX_OK)
    })
}

/// Waits up to `timeout_ms` milliseconds (0: do not wait; negative: without limit) for a
/// receivable message and reads the head of the queue without locking it, as `postbox_peek`;
/// another receiver may take it meanwhile.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_TIMEOUT` (nothing receivable in time); otherwise as `postbox_peek`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_peek_wait(
    queue: *const postbox_queue,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(message_out, "message_out")?;
        let env = q.queue.peek_wait(timeout(timeout_ms))?.ok_or_else(|| {
            Failure::new(
                POSTBOX_TIMEOUT,
                format!(
                    "nothing receivable arrived in queue {:?} within {timeout_ms} ms",
                    q.queue.name()
                ),
            )
        })?;
        out.write(
            postbox_message::new(HeldMessage::read(env, MessageState::Active), q.tag).into_raw(),
        );
        Ok(POSTBOX_OK)
    })
}

/// Looks up message `id` of this queue, whatever its state (receivable, locked, scheduled,
/// deferred), without locking it. `message_out` receives a handle the caller frees with
/// `postbox_message_free`; `postbox_message_queue_state` says which state it found.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (no such message in this queue);
/// `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_get(
    queue: *const postbox_queue,
    id: u64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(message_out, "message_out")?;
        let (env, state) = q.queue.get_with_state(MessageId(id))?.ok_or_else(|| {
            Failure::new(
                POSTBOX_NOT_FOUND,
                format!("message {id} is not in queue {:?}", q.queue.name()),
            )
        })?;
        out.write(postbox_message::new(HeldMessage::read(env, state), q.tag).into_raw());
        Ok(POSTBOX_OK)
    })
}

/// Starts browsing the receivable messages of the queue in delivery order (priority, then send
/// order), without locking them. `browser_out` receives an iterator the caller frees with
/// `postbox_browse_free`. Nothing is read yet: a deleted queue or a closed store is reported
/// by `postbox_browse_next`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_browse_open(
    queue: *const postbox_queue,
    browser_out: *mut *mut postbox_browser,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::required(browser_out, "browser_out")?;
        out.write(Box::into_raw(Box::new(postbox_browser {
            it: Mutex::new(q.queue.browse()),
            tag: q.tag,
        })));
        Ok(POSTBOX_OK)
    })
}

/// Advances the browser: `message_out` receives the next message (a handle the caller frees
/// with `postbox_message_free`; it cannot be settled).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` at the end (and on every later call);
/// `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_browse_next(
    browser: *mut postbox_browser,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let b = arg_ref(browser, "browser")?;
        let out = Out::required(message_out, "message_out")?;
        b.live()?;
        let next = b.it.lock().next();
        let env =
            next.ok_or_else(|| Failure::new(POSTBOX_NOT_FOUND, "no further message to browse"))??;
        out.write(
            postbox_message::new(HeldMessage::read(env, MessageState::Active), b.tag).into_raw(),
        );
        Ok(POSTBOX_OK)
    })
}

/// Frees a browser. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_browse_free(browser: *mut postbox_browser) {
    guard(|| {
        drop(take_box(browser));
        Ok(())
    })
}

/// Receives the next message, waiting up to `timeout_ms` milliseconds for one to arrive
/// (0: do not wait; negative: wait without limit).
///
/// With `tx` NULL (peek-lock): the message is locked for the queue's lock duration; settle it
/// with `postbox_message_complete` / `_abandon` / `_dead_letter` / `_resubmit`, or free it
/// unsettled to abandon it. With a transaction: the message belongs to `tx`, whose commit
/// completes it and whose abort returns it; the handle is for reading only.
///
/// `message_out` receives a handle the caller owns and frees with `postbox_message_free` (also
/// after settling it). The message's delivery count was incremented and persisted before it was
/// handed out; past the queue's `max_deliveries` it goes to the dead-letter queue instead.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_TIMEOUT` (nothing arrived in time: a normal outcome);
/// `POSTBOX_INVALID_ARGUMENT` (NULL queue or `message_out`, a transaction of another store or
/// already finished, a queue that requires sessions: accept a session instead);
/// `POSTBOX_QUEUE_NOT_FOUND` (queue deleted); `POSTBOX_CLOSED` (also when the store closes
/// during the wait); `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_receive(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        receive_one(
            queue,
            tx,
            timeout_ms,
            message_out,
            |q, wait| q.receive(wait),
            |t, q, wait| t.receive(q, wait),
        )
    })
}

/// The one receive of a single message behind `postbox_receive` and the selective receives:
/// `peek_lock` without a transaction, `in_tx` with one.
fn receive_one(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
    peek_lock: impl FnOnce(&Queue, Duration) -> postbox::Result<Option<Received>>,
    in_tx: impl FnOnce(&mut Transaction, &Queue, Duration) -> postbox::Result<Option<Envelope>>,
) -> Outcome<c_int> {
    let q = live(queue)?;
    let out = Out::required(message_out, "message_out")?;
    let wait = timeout(timeout_ms);
    let nothing = || {
        Failure::new(
            POSTBOX_TIMEOUT,
            format!(
                "no message arrived in queue {:?} within {timeout_ms} ms",
                q.queue.name()
            ),
        )
    };
    let m = if tx.is_null() {
        let r = peek_lock(&q.queue, wait)?.ok_or_else(nothing)?;
        postbox_message::new(HeldMessage::received(r), q.tag)
    } else {
        let env = with_tx(tx, q.tag, |t| Ok(in_tx(t, &q.queue, wait)?))?.ok_or_else(nothing)?;
        postbox_message::new(HeldMessage::in_transaction(env, (), None, None), q.tag)
    };
    out.write(m.into_raw());
    Ok(POSTBOX_OK)
}

/// Receives message `id` of the queue, waiting up to `timeout_ms` for it to be receivable
/// (sent, its scheduled time come, its lock released); other messages are left alone. As
/// `postbox_receive` otherwise, with or without a transaction. The one way to receive a
/// deferred message (`postbox_message_defer`); a lock on it that ends unsettled leaves it
/// deferred.
///
/// On a queue that requires sessions this is refused, with or without a transaction: a held
/// session is exclusive, so only the holder of a group takes its messages, through
/// `postbox_session_receive_by_id`.
///
/// # Returns
/// As `postbox_receive`: `POSTBOX_TIMEOUT` also when `id` is not a receivable message of
/// this queue by the deadline (another queue's, completed, or never sent);
/// `POSTBOX_INVALID_ARGUMENT` also on a queue that requires sessions.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_receive_by_id(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    id: u64,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let id = MessageId(id);
        receive_one(
            queue,
            tx,
            timeout_ms,
            message_out,
            |q, wait| q.receive_by_id(id, wait),
            |t, q, wait| t.receive_by_id(q, id, wait),
        )
    })
}

/// Receives the first message (in delivery order) whose correlation id is `correlation_id`
/// (NUL-terminated UTF-8), waiting up to `timeout_ms` for one: on a reply queue shared by
/// several requesters, each takes only its own replies. As `postbox_receive` otherwise.
///
/// The pick reads the queue's receivable messages in delivery order until one matches, so its
/// cost grows with the receivable messages ahead of the match. Refused on a queue that requires
/// sessions, with or without a transaction: use `postbox_session_receive_by_correlation_id`.
///
/// # Returns
/// As `postbox_receive`; also `POSTBOX_INVALID_ARGUMENT` for a NULL or invalid
/// `correlation_id`, and on a queue that requires sessions.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_receive_by_correlation_id(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    correlation_id: *const c_char,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let cid = arg_str(correlation_id, "correlation_id")?;
        receive_one(
            queue,
            tx,
            timeout_ms,
            message_out,
            |q, wait| q.receive_by_correlation_id(cid, wait),
            |t, q, wait| t.receive_by_correlation_id(q, cid, wait),
        )
    })
}

/// Receives up to `max` messages with peek-lock in one commit, waiting up to `timeout_ms` for
/// the first (as in `postbox_receive`). `messages_out` is a caller-provided array of `max`
/// pointers; on success its first `*count_out` entries receive handles the caller frees with
/// `postbox_message_free`, and the rest are left untouched.
///
/// # Returns
/// `POSTBOX_OK` (at least one message); `POSTBOX_TIMEOUT` (none arrived in time);
/// `POSTBOX_INVALID_ARGUMENT` (NULL argument, `max` 0); `POSTBOX_QUEUE_NOT_FOUND` (queue
/// deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors. On `POSTBOX_TIMEOUT`
/// `*count_out` is set to 0 (the one output written on a failure); on other failures it is
/// left alone.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_receive_batch(
    queue: *mut postbox_queue,
    max: usize,
    timeout_ms: i64,
    messages_out: *mut *mut postbox_message,
    count_out: *mut usize,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        if max == 0 {
            return Err(Failure::invalid("max must be at least 1"));
        }
        let slots = arg_slice_mut(messages_out, max, "messages_out")?;
        let count = Out::required(count_out, "count_out")?;
        let got = q.queue.receive_batch(max, timeout(timeout_ms))?;
        hand_out(q, got, slots, count, timeout_ms)
    })
}

/// Completes `count` received messages of `queue` in one commit, all or none. Every handle must
/// be a message of `queue` that it holds (checked before anything changes: a refusal leaves
/// every handle as it was). Once the commit ran, the handles are settled whatever the outcome
/// (on `POSTBOX_LOCK_LOST` none was completed and the others returned to the queue); free them
/// with `postbox_message_free` as usual.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (a lock was lost: nothing completed);
/// `POSTBOX_INVALID_ARGUMENT` (NULL queue or entry, a message not held, listed twice, or of
/// another store or of another queue); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_complete_batch(
    queue: *mut postbox_queue,
    messages: *const *mut postbox_message,
    count: usize,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let messages = arg_slice(messages, count, "messages")?;
        complete_batch(&q.queue, q.tag, messages)?;
        Ok(POSTBOX_OK)
    })
}

/// Completes `done_count` received messages of `queue` and locks up to `max` more in **one**
/// commit — a batched consumer's loop step, one durable commit per batch instead of two. If
/// nothing is receivable right then, waits up to `timeout_ms` (as in `postbox_receive`; the
/// completion is durable by then). `done` may be NULL when `done_count` is 0. The completed
/// handles are settled whatever the outcome and still freed with `postbox_message_free`;
/// `messages_out` is a caller-provided array of `max` pointers whose first `*count_out` entries
/// receive new handles, also freed with `postbox_message_free`.
///
/// # Returns
/// `POSTBOX_OK` (at least one new message); `POSTBOX_TIMEOUT` (the messages were completed and
/// none arrived in time); `POSTBOX_LOCK_LOST` (a lock of `done` was lost: nothing completed or
/// received, the others returned to the queue); `POSTBOX_INVALID_ARGUMENT` (NULL argument,
/// `max` 0, a message not held, listed twice, of another store or of another queue: nothing
/// completed or received, every handle as it was); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors. On `POSTBOX_TIMEOUT` `*count_out` is set to 0.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_complete_batch_and_receive(
    queue: *mut postbox_queue,
    done: *const *mut postbox_message,
    done_count: usize,
    max: usize,
    timeout_ms: i64,
    messages_out: *mut *mut postbox_message,
    count_out: *mut usize,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        if max == 0 {
            return Err(Failure::invalid("max must be at least 1"));
        }
        let done = if done_count == 0 {
            &[][..]
        } else {
            arg_slice(done, done_count, "done")?
        };
        let slots = arg_slice_mut(messages_out, max, "messages_out")?;
        let count = Out::required(count_out, "count_out")?;
        let received = crate::message::take_batch(&q.queue, q.tag, done)?;
        let got = q
            .queue
            .complete_batch_and_receive(received, max, timeout(timeout_ms))?;
        hand_out(q, got, slots, count, timeout_ms)
    })
}
