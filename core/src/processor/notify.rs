//! Telling the user's callbacks (`on_event`, `on_scale`) what a running processor did, with
//! their panics caught and logged.

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::{ProcessorEvent, Shared, panic_text};

impl Shared {
    /// Tells the `on_event` callback, if any, about `event`.
    pub(super) fn emit(&self, event: ProcessorEvent) {
        if let Some(f) = &self.config.on_event
            && let Err(p) = catch_unwind(AssertUnwindSafe(|| f(&event)))
        {
            tracing::error!(
                queue = %self.queue.name(),
                panic = %panic_text(p.as_ref()),
                "processor on_event callback panicked"
            );
        }
    }

    /// Tells `on_scale` and `on_event` the live worker count after a change. Reports are made
    /// one at a time, each with the count at its making (not the count its caller saw): workers
    /// retiring together then report in order and the last report is the final count.
    pub(super) fn report_scale(&self) {
        let mut last = self.last_scale.lock();
        let live = self.state.lock().live;
        if *last == Some(live) {
            return;
        }
        *last = Some(live);
        self.emit(ProcessorEvent::Scaled { workers: live });
        if let Some(f) = &self.config.on_scale
            && let Err(p) = catch_unwind(AssertUnwindSafe(|| f(live)))
        {
            tracing::error!(
                queue = %self.queue.name(),
                workers = live,
                panic = %panic_text(p.as_ref()),
                "processor on_scale callback panicked"
            );
        }
    }
}
