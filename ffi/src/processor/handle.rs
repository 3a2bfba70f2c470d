//! The running processor's handle: stop, join, shutdown, stats and free.

use std::ffi::c_int;

use postbox::ShutdownReport;

use super::{postbox_processor, postbox_processor_counters, postbox_shutdown_report};
use crate::guard::{Out, arg_ref, guard, take_box};
use crate::handle::live;
use crate::status::POSTBOX_OK;
use crate::timeout;

fn report(r: ShutdownReport) -> postbox_shutdown_report {
    postbox_shutdown_report {
        processed: r.processed,
        failed: r.failed,
        dead_lettered: r.dead_lettered,
        lock_lost: r.lock_lost,
        returned: r.returned,
        still_running: r.still_running as u64,
        finished: c_int::from(r.finished),
        unsettled: r.unsettled,
        forked: c_int::from(r.forked),
    }
}

/// Makes every worker stop taking messages, without waiting; running callbacks finish normally.
/// No callback starts after this returns. Not async-signal-safe: from a signal handler, set a
/// flag (or use `sigwait` in a thread) and call this from normal code.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_stop(processor: *const postbox_processor) -> c_int {
    guard(|| {
        live(processor)?.processor.stop();
        Ok(POSTBOX_OK)
    })
}

/// Waits up to `timeout_ms` (negative: without limit) for a stopped processor to finish: every
/// callback returned, its commit or abort applied, prefetched messages returned — waiting on a
/// condition variable, not polling. `report_out` (may be NULL) receives the report; its
/// `finished` field says whether the processor finished in time.
///
/// In a forked child, where the processor's threads do not exist, it returns at once without
/// waiting or writing anything: `report_out` receives `forked` = 1, `finished` = 0,
/// `still_running` = 0 and the counters as they were at the fork; the parent's processor runs on.
///
/// # Returns
/// `POSTBOX_OK` (also when the timeout hit: see `finished`; and in a forked child: see
/// `forked`); `POSTBOX_INVALID_ARGUMENT` (NULL processor).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_join(
    processor: *const postbox_processor,
    timeout_ms: i64,
    report_out: *mut postbox_shutdown_report,
) -> c_int {
    guard(|| {
        // No process check: in a forked child the engine's join reads only atomics and reports.
        let p = arg_ref(processor, "processor")?;
        let out = Out::optional(report_out);
        out.write(report(p.processor.join(timeout(timeout_ms))));
        Ok(POSTBOX_OK)
    })
}

/// Graceful shutdown: `postbox_processor_stop`, then `postbox_processor_join` with
/// `timeout_ms`. After a finished shutdown nothing is left locked by the processor. In a forked
/// child it stops nothing and reports at once with `forked` = 1, as `postbox_processor_join`.
///
/// # Returns
/// As `postbox_processor_join`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_shutdown(
    processor: *const postbox_processor,
    timeout_ms: i64,
    report_out: *mut postbox_shutdown_report,
) -> c_int {
    guard(|| {
        // In a forked child `Processor::shutdown` stops nothing and reports `forked`.
        let p = arg_ref(processor, "processor")?;
        let out = Out::optional(report_out);
        out.write(report(p.processor.shutdown(timeout(timeout_ms))));
        Ok(POSTBOX_OK)
    })
}

/// Reads the processor's counters (readable at any time) into `stats_out`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_stats(
    processor: *const postbox_processor,
    stats_out: *mut postbox_processor_counters,
) -> c_int {
    guard(|| {
        let p = live(processor)?;
        let out = Out::required(stats_out, "stats_out")?;
        let s = p.processor.stats();
        out.write(postbox_processor_counters {
            processed: s.processed,
            failed: s.failed,
            dead_lettered: s.dead_lettered,
            lock_lost: s.lock_lost,
            returned: s.returned,
            in_flight: s.in_flight as u64,
            workers: s.workers as u64,
        });
        Ok(POSTBOX_OK)
    })
}

/// Frees a processor handle. Call `postbox_processor_shutdown` first: freeing a processor that
/// still runs shuts it down, waiting up to 30 s for running callbacks. NULL is a no-op.
/// Never call it from the processor's own callback.
///
/// In a forked child the processor's threads do not exist: the handle is let go at once
/// (its memory is left alone) and the parent's processor is unaffected.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_free(processor: *mut postbox_processor) {
    guard(|| {
        if let Some(p) = take_box(processor) {
            if p.tag.is_forked() {
                // Dropping would stop and join workers that only exist in the parent.
                std::mem::forget(p);
            } else {
                drop(p);
            }
        }
        Ok(())
    })
}
