//! `postbox_processor`: N receivers calling a C callback, with lock renewal, retries and
//! graceful shutdown.

mod callback;
mod handle;

use std::ffi::{c_int, c_void};
use std::time::Duration;

use postbox::binding::{HeldMessage, finish_lent, retry_policy};
use postbox::sync::Mutex;
use postbox::{Autoscale, Delivery, Processor, RetryPolicy, Store, Transaction};

use crate::StoreTag;
use crate::guard::{Failure, Out, Outcome, arg_ref, guard, read_versioned, take_box};
use crate::handle::Handle;
use crate::message::postbox_message;
use crate::queue::postbox_queue;
use crate::status::POSTBOX_OK;
use crate::tx::postbox_tx;

pub use callback::*;
pub use handle::*;

/// A peek-lock processor callback. Called on one of the processor's worker threads — several
/// at once when there are several workers, so `user_data` must be safe to share between them.
///
/// `message` is borrowed for the duration of the call: read it with the `postbox_message_*`
/// accessors, never free, settle or keep it. Return `POSTBOX_OK` to complete the message; any
/// other value fails it: it is abandoned for a later retry (after the retry delay), and
/// dead-lettered once it has used up the queue's `max_deliveries`, with the status's
/// description as the dead-letter description. To dead-letter it at once, call
/// `postbox_processor_dead_letter` before returning.
pub type postbox_handler =
    Option<unsafe extern "C" fn(user_data: *mut c_void, message: *const postbox_message) -> c_int>;

/// A transactional processor callback: as `postbox_handler`, plus a transaction lent for the
/// call. Sends made with it (`postbox_send(queue, tx, …)`) and receives (`postbox_receive(queue,
/// tx, …)`) commit together with the message's completion when the callback returns
/// `POSTBOX_OK`, and are discarded otherwise. Never commit, abort or keep `tx`: the processor
/// does that.
pub type postbox_tx_handler = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        message: *const postbox_message,
        tx: *mut postbox_tx,
    ) -> c_int,
>;

/// The most workers a processor runs: `workers`, `autoscale_max_workers` and `autoscale_reserve`
/// above it make `postbox_processor_start` return `POSTBOX_INVALID_ARGUMENT`.
pub const POSTBOX_MAX_PROCESSOR_WORKERS: u32 = 1024;
// The header spells it as a literal; the build fails if it ever differs from the engine's.
const _: () = assert!(POSTBOX_MAX_PROCESSOR_WORKERS as usize == postbox::MAX_PROCESSOR_WORKERS);

/// A callback told each change of a processor's live worker count: `old_workers` is the count
/// it last reported (0 before the first call), `new_workers` the count now. Called when workers
/// start (at `postbox_processor_start` too), when the autoscaler adds or retires workers, and as
/// they stop. Calls are never concurrent (a processor serialises them), but they run on the
/// processor's threads (the autoscaler, a worker, or the thread calling
/// `postbox_processor_start`): keep it short, and never stop, join, shut down or free the
/// processor from it.
pub type postbox_scale_callback =
    Option<unsafe extern "C" fn(old_workers: u32, new_workers: u32, user_data: *mut c_void)>;

/// Options for `postbox_processor_start`. A zeroed struct with `struct_size` set means "all
/// defaults"; `postbox_processor_options_init` does exactly that. Each 0 below means the default.
/// Versioned: fields are only appended, and the smaller structs of older headers (without
/// `sessions`, or without `on_scale` and the fields after it) are still accepted, their missing
/// fields taking the default.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct postbox_processor_options {
    /// `sizeof(postbox_processor_options)`.
    pub struct_size: u32,
    /// Number of receiver threads; 0 means 4. With autoscaling, the starting count.
    pub workers: u32,
    /// Retry delay after a failed first delivery, in ms; 0 means 100 ms.
    pub retry_initial_ms: u64,
    /// Growth factor of the retry delay per further delivery; 0 means 2.
    pub retry_multiplier: u32,
    /// Non-zero: retry failed messages at once (no delay), ignoring the other retry fields.
    pub retry_immediately: c_int,
    /// Upper bound of the retry delay, in ms; 0 means 60 s.
    pub retry_max_ms: u64,
    /// Time limit per callback, in ms; 0 means none. Past it, the message is failed when the
    /// callback returns, whatever it returns (callbacks are never interrupted).
    pub handler_timeout_ms: u64,
    /// How long after its receive a message's lock keeps being renewed while the callback runs,
    /// in ms; 0 means 5 minutes.
    pub max_auto_renew_ms: u64,
    /// Non-zero: never renew locks (a callback running past the queue's lock duration loses its
    /// message to another receiver).
    pub disable_auto_renew: c_int,
    /// Messages each worker locks ahead of the one it handles; 0 means none.
    pub prefetch: u32,
    /// Autoscaling: the most workers; 0 turns autoscaling off.
    pub autoscale_max_workers: u32,
    /// Autoscaling: the fewest workers (may be 0).
    pub autoscale_min_workers: u32,
    /// Autoscaling: spare workers kept above what the backlog asks for.
    pub autoscale_reserve: u32,
    /// Autoscaling: backlog per worker; 0 means 20.
    pub autoscale_messages_per_worker: u64,
    /// Autoscaling: how often the backlog is checked, in ms; 0 means 5 s.
    pub autoscale_check_interval_ms: u64,
    /// Non-zero: session mode, for a queue that requires sessions (`requires_session`): each
    /// worker accepts one session at a time and calls the callback for its messages in send
    /// order, one by one, until none is receivable, then releases it and accepts the next; N
    /// workers work on N groups in parallel, never two on one group. `prefetch` does not apply.
    /// Starting fails with `POSTBOX_INVALID_ARGUMENT` when the mode does not match the queue
    /// (session mode on a plain queue, or 0 on a session queue).
    pub sessions: c_int,
    /// Called with the old and new worker count each time the number of live workers changes
    /// (see `postbox_scale_callback`); NULL for none. Works with and without autoscaling.
    pub on_scale: postbox_scale_callback,
    /// Passed to `on_scale` untouched (not the handler's `user_data`); must stay valid until
    /// the processor is shut down. May be NULL.
    pub on_scale_user_data: *mut c_void,
    /// Autoscaling: non-zero starts the processor at `autoscale_min_workers` workers instead of
    /// `workers`. With `autoscale_min_workers` 0 the processor starts with no worker thread at
    /// all, and the autoscaler adds workers (within one `autoscale_check_interval_ms`) once
    /// messages are waiting. Needs `autoscale_max_workers` > 0, else
    /// `POSTBOX_INVALID_ARGUMENT`.
    pub autoscale_start_at_min: c_int,
}

impl Default for postbox_processor_options {
    fn default() -> Self {
        postbox_processor_options {
            struct_size: 0,
            workers: 0,
            retry_initial_ms: 0,
            retry_multiplier: 0,
            retry_immediately: 0,
            retry_max_ms: 0,
            handler_timeout_ms: 0,
            max_auto_renew_ms: 0,
            disable_auto_renew: 0,
            prefetch: 0,
            autoscale_max_workers: 0,
            autoscale_min_workers: 0,
            autoscale_reserve: 0,
            autoscale_messages_per_worker: 0,
            autoscale_check_interval_ms: 0,
            sessions: 0,
            on_scale: None,
            on_scale_user_data: std::ptr::null_mut(),
            autoscale_start_at_min: 0,
        }
    }
}

/// The first version of the struct (before `sessions`): callers built against that header pass
/// its size, and get the default (no session mode). The second version ends before `on_scale`;
/// the fields it lacks read as zero (no callback, start at `workers`), which `read_versioned`
/// gives every missing field.
const PROCESSOR_OPTIONS_V1: usize = std::mem::offset_of!(postbox_processor_options, sessions);
const PROCESSOR_OPTIONS_FULL: usize = size_of::<postbox_processor_options>();

/// Counters of a processor, filled by `postbox_processor_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct postbox_processor_counters {
    /// Messages whose callback succeeded and whose completion was committed.
    pub processed: u64,
    /// Callback failures (non-OK status, time limit, failed transaction commit).
    pub failed: u64,
    /// Messages the processor moved to the dead-letter queue.
    pub dead_lettered: u64,
    /// Settlements refused because the lock had been lost (the message comes again).
    pub lock_lost: u64,
    /// Messages received as the processor stopped and returned untouched.
    pub returned: u64,
    /// Callbacks running now (including their commit or abort).
    pub in_flight: u64,
    /// Live workers now.
    pub workers: u64,
}

/// What `postbox_processor_shutdown` and `postbox_processor_join` report.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct postbox_shutdown_report {
    /// Messages processed and completed over the processor's life.
    pub processed: u64,
    /// Callback failures over the processor's life.
    pub failed: u64,
    /// Messages dead-lettered by the processor over its life.
    pub dead_lettered: u64,
    /// Settlements refused with a lost lock over the processor's life.
    pub lock_lost: u64,
    /// Messages returned untouched because they were received as the processor stopped.
    pub returned: u64,
    /// Callbacks still running when the timeout hit (0 after a complete shutdown).
    pub still_running: u64,
    /// Non-zero when every worker had finished: all callbacks returned, their commits applied,
    /// nothing left locked by the processor.
    pub finished: c_int,
    /// Messages the processor could not settle or return (e.g. the store was closed under it);
    /// their locks expire by themselves.
    pub unsettled: u64,
    /// Non-zero when `postbox_processor_join` or `_shutdown` was called in a forked child,
    /// where the processor's threads do not exist: nothing was stopped, waited for or written,
    /// `finished` is 0 and the counters are those at the fork.
    pub forked: c_int,
}

/// A running processor: worker threads that receive from one queue and call a C callback.
/// Started by `postbox_processor_start` or `postbox_processor_start_transactional`; stopped by
/// `postbox_processor_shutdown` (or `_stop` then `_join`); freed with `postbox_processor_free`.
/// Thread-safe: stop, join, stats and shutdown may be called from any thread, but not from
/// inside the processor's own callback (a join there returns at once, unfinished).
pub struct postbox_processor {
    processor: Processor,
    tag: StoreTag,
}

// In a forked child its worker threads do not exist, and its state may be locked by one of
// them forever.
impl Handle for postbox_processor {
    const ARG: &'static str = "processor";

    fn tag(&self) -> StoreTag {
        self.tag
    }
}

/// The caller's `user_data`, shared by the worker threads.
#[derive(Clone, Copy)]
struct UserData(*mut c_void);

// SAFETY: postbox never dereferences `user_data`; it only passes it back to the callback. The
// header documents that the callback runs on several threads at once, so making the pointer
// safe to use from them is the caller's part of the contract.
unsafe impl Send for UserData {}
// SAFETY: as above.
unsafe impl Sync for UserData {}

/// Fills `options` with the defaults and sets its `struct_size`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_options_init(options: *mut postbox_processor_options) -> c_int {
    guard(|| {
        Out::required(options, "options")?.write(postbox_processor_options {
            struct_size: PROCESSOR_OPTIONS_FULL as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

fn builder(
    q: &postbox_queue,
    options: *const postbox_processor_options,
) -> Outcome<postbox::ProcessorBuilder> {
    let o = read_versioned(options, PROCESSOR_OPTIONS_V1, "options")?.unwrap_or_default();
    let count = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
    let ms = Duration::from_millis;
    let mut b = Processor::builder(&q.queue);
    if o.workers != 0 {
        b = b.workers(count(o.workers));
    }
    let nonzero_ms = |v: u64| (v != 0).then(|| ms(v));
    if o.retry_immediately != 0 {
        b = b.retry(RetryPolicy::immediate());
    } else if let Some(p) = retry_policy(
        nonzero_ms(o.retry_initial_ms),
        (o.retry_multiplier != 0).then_some(o.retry_multiplier),
        nonzero_ms(o.retry_max_ms),
    ) {
        b = b.retry(p);
    }
    if o.handler_timeout_ms != 0 {
        b = b.handler_timeout(ms(o.handler_timeout_ms));
    }
    if o.disable_auto_renew != 0 {
        b = b.max_auto_renew(Duration::ZERO);
    } else if o.max_auto_renew_ms != 0 {
        b = b.max_auto_renew(ms(o.max_auto_renew_ms));
    }
    if o.prefetch != 0 {
        b = b.prefetch(count(o.prefetch));
    }
    if o.autoscale_max_workers != 0 {
        let mut a = Autoscale::new(
            count(o.autoscale_min_workers),
            count(o.autoscale_max_workers),
        )
        .reserve(count(o.autoscale_reserve));
        if o.autoscale_messages_per_worker != 0 {
            a = a.messages_per_worker(o.autoscale_messages_per_worker);
        }
        if o.autoscale_check_interval_ms != 0 {
            a = a.check_interval(ms(o.autoscale_check_interval_ms));
        }
        b = b.autoscale(a);
    }
    if o.autoscale_start_at_min != 0 {
        if o.autoscale_max_workers == 0 {
            return Err(Failure::invalid(
                "options.autoscale_start_at_min needs autoscaling (autoscale_max_workers > 0)",
            ));
        }
        // The engine clamps the starting count to the autoscale bounds: 0 starts at the minimum.
        b = b.workers(0);
    }
    if o.sessions != 0 {
        b = b.sessions(true);
    }
    if let Some(f) = o.on_scale {
        b = b.on_scale(scale_reporter(f, UserData(o.on_scale_user_data)));
    }
    Ok(b)
}

/// The engine tells the new count only; C gets the previous one too. The mutex serialises the
/// calls (the engine reports from several threads), so each `old` is the `new` of the call
/// before.
fn scale_reporter(
    f: unsafe extern "C" fn(u32, u32, *mut c_void),
    user: UserData,
) -> impl Fn(usize) + Send + Sync + 'static {
    let last = Mutex::new(0u32);
    move |live: usize| {
        let user = user;
        let new = u32::try_from(live).unwrap_or(u32::MAX);
        let mut last = last.lock();
        // SAFETY: `f` is a non-NULL function pointer of the documented type, which the header
        // requires to stay callable while the processor runs; `user.0` is passed back untouched.
        unsafe { f(*last, new, user.0) };
        *last = new;
    }
}

/// The message handle lent to one callback call: its processor calls
/// (`postbox_processor_mark_done`, ...) go to `d`'s lock. Dropped (by `finish`) before the
/// callback closure returns.
fn lend(d: &Delivery, tag: StoreTag) -> postbox_message {
    postbox_message::new(HeldMessage::lent(d), tag)
}

/// After the callback: ends the loan (what the callback asked for is with the delivery
/// already), turns a status into the handler result.
fn finish(m: postbox_message, status: c_int) -> Result<(), String> {
    let handler = if status == POSTBOX_OK {
        Ok(())
    } else {
        // SAFETY: postbox_strerror returns a static NUL-terminated string.
        let text = unsafe { std::ffi::CStr::from_ptr(crate::postbox_strerror(status)) };
        Err(format!(
            "the handler returned status {status} ({})",
            text.to_string_lossy()
        ))
    };
    finish_lent(&m.held, handler)
}

fn started(
    p: postbox::Result<Processor>,
    tag: StoreTag,
    out: Out<*mut postbox_processor>,
) -> Outcome<c_int> {
    let processor = p?;
    out.write(Box::into_raw(Box::new(postbox_processor {
        processor,
        tag,
    })));
    Ok(POSTBOX_OK)
}

/// The queue of a processor about to start: refused in a forked child, and on a closed store
/// (the workers would only ever see `POSTBOX_CLOSED`).
fn check_startable(q: &postbox_queue) -> Outcome<()> {
    q.live()?;
    // `try_begin` fails with `Closed` exactly when the store cannot take work; the empty
    // transaction it returns otherwise is dropped at once, which does nothing.
    drop(q.store.try_begin()?);
    Ok(())
}

/// Starts a processor on `queue` in peek-lock mode: worker threads receive messages and call
/// `handler(user_data, message)` for each; `POSTBOX_OK` completes the message, any other
/// status fails it (see `postbox_handler`). Locks are renewed while a callback runs (up to
/// `max_auto_renew_ms`).
///
/// `options` may be NULL for the defaults (4 workers, retry 100 ms doubling to 60 s). The
/// processor keeps its own reference to the queue, so `queue` may be freed afterwards;
/// `user_data` must stay valid until the processor is shut down. `processor_out` receives a
/// handle the caller shuts down with `postbox_processor_shutdown` and frees with
/// `postbox_processor_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL queue, handler or `processor_out`, bad
/// `struct_size`, autoscale bounds with min above max, `sessions` not matching the queue's
/// `requires_session`); `POSTBOX_IO` (a thread could not be started); `POSTBOX_CLOSED` (the
/// store was closed); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_start(
    queue: *const postbox_queue,
    options: *const postbox_processor_options,
    handler: postbox_handler,
    user_data: *mut c_void,
    processor_out: *mut *mut postbox_processor,
) -> c_int {
    guard(|| {
        let q = arg_ref(queue, "queue")?;
        let handler = handler.ok_or_else(|| Failure::null("handler"))?;
        let out = Out::required(processor_out, "processor_out")?;
        let b = builder(q, options)?;
        check_startable(q)?;
        let (tag, user) = (q.tag, UserData(user_data));
        let p = b.start(move |d: &Delivery| {
            let user = user;
            let m = lend(d, tag);
            // SAFETY: `handler` is a non-NULL function pointer of the documented type, and the
            // header requires it to stay callable while the processor runs; `m` outlives the
            // call; `user.0` is passed back untouched.
            let status = unsafe { handler(user.0, &m) };
            finish(m, status)
        });
        started(p, tag, out)
    })
}

/// Starts a processor on `queue` in transactional mode: as `postbox_processor_start`, but the
/// callback also gets a transaction (see `postbox_tx_handler`) so that replies and follow-up
/// sends commit atomically with the message's completion.
///
/// # Returns
/// As `postbox_processor_start`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_start_transactional(
    queue: *const postbox_queue,
    options: *const postbox_processor_options,
    handler: postbox_tx_handler,
    user_data: *mut c_void,
    processor_out: *mut *mut postbox_processor,
) -> c_int {
    guard(|| {
        let q = arg_ref(queue, "queue")?;
        let handler = handler.ok_or_else(|| Failure::null("handler"))?;
        let out = Out::required(processor_out, "processor_out")?;
        let b = builder(q, options)?;
        check_startable(q)?;
        let (tag, user, store) = (q.tag, UserData(user_data), q.store.clone());
        let p = b.start_transactional(move |d: &Delivery, tx: &mut Transaction| {
            let user = user;
            let m = lend(d, tag);
            let lent = lend_tx(tx, &store, tag);
            // SAFETY: as in `postbox_processor_start`; `lent` is a live transaction handle for
            // the duration of the call, which the callback must not free.
            let status = unsafe { handler(user.0, &m, lent) };
            *tx = reclaim_tx(lent, &store);
            finish(m, status)
        });
        started(p, tag, out)
    })
}

/// Moves the processor's transaction into a heap handle C can use during the callback. The
/// processor keeps an empty placeholder meanwhile (its drop does nothing: no locks, no sends).
fn lend_tx(tx: &mut Transaction, store: &Store, tag: StoreTag) -> *mut postbox_tx {
    let t = std::mem::replace(tx, store.begin());
    Box::into_raw(Box::new(postbox_tx {
        tx: Mutex::new(Some(t)),
        tag,
        lent: true,
    }))
}

fn reclaim_tx(lent: *mut postbox_tx, store: &Store) -> Transaction {
    take_box(lent)
        .and_then(|h| h.tx.into_inner())
        .unwrap_or_else(|| store.begin())
}
