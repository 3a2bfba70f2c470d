//! `postbox recover`: opens a store that crashed and whose write-ahead log is missing or
//! damaged, giving up what only that log held, and reports what was lost.

use std::path::Path;

use postbox::Store;
use serde_json::json;

use super::open_with;
use crate::fail::Outcome;

/// Opens the store at `path` with the loss of its log accepted (multi-process, like every
/// command), then closes it: from then on it opens normally. Says what could not be replayed,
/// or that nothing was lost.
///
/// # Errors
///
/// The open's failure (a store that is not one, busy, I/O) with its exit code.
pub fn recover(path: &Path, as_json: bool) -> Outcome {
    let store = open_with(
        path,
        Store::builder().multi_process(true).accept_log_loss(true),
    )?;
    let replayed = store.stats().replayed_records;
    let loss = store.log_loss().map(str::to_owned);
    store.close()?;
    if as_json {
        say!(
            "{}",
            json!({ "replayed_records": replayed, "lost": loss.is_some(), "loss": loss })
        );
    } else {
        match loss {
            Some(text) => say!("recovered with a loss: {text}"),
            None => say!(
                "nothing lost: {replayed} log records replayed; {} opens normally",
                path.display()
            ),
        }
    }
    Ok(())
}
