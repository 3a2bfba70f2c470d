//! Catching the panics redb raises on a damaged file, without printing them.
//!
//! redb can panic on pages it cannot make sense of; the engine catches those at its boundary
//! and reports `Corrupted` (invariant 9). The standard panic hook would still print each one to
//! stderr, and library code prints nothing: while a guarded call runs on a thread, the hook
//! installed here turns the report into a `tracing` event instead. Panics anywhere else go to
//! the hook that was installed before, unchanged.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    /// How many guarded calls are running on this thread.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

static INSTALL: Once = Once::new();

fn install() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if DEPTH.with(Cell::get) > 0 {
                tracing::error!(panic = %info, "caught a panic in the storage layer");
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, catching a panic quietly; `Err` carries the panic's payload.
pub fn catch<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    install();
    DEPTH.with(|d| d.set(d.get() + 1));
    let result = catch_unwind(AssertUnwindSafe(f));
    DEPTH.with(|d| d.set(d.get() - 1));
    result
}
