//! The logic of postbox's fuzz targets (`fuzz/fuzz_targets/`), one module per target, each with
//! `run(&[u8])`. It builds on stable, so `tests/fuzz_regressions.rs` replays every input under
//! `fuzz/regressions/<target>/` in ordinary CI; the libFuzzer binaries only call `run`.
//!
//! Every target bounds its work (input sizes, operation counts) so that one execution takes
//! milliseconds, and works in a temporary directory.

pub mod c_api;
pub mod open_store;
pub mod queue_model;
pub mod records;
pub mod typed_body;

use std::path::Path;

/// A temporary directory, on tmpfs when there is one: the targets fsync on every commit.
pub fn tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::Builder::new()
            .prefix("postbox-fuzz")
            .tempdir_in(shm)
    {
        return d;
    }
    tempfile::Builder::new()
        .prefix("postbox-fuzz")
        .tempdir()
        .expect("a temporary directory")
}

/// Splits off the first byte (the input's choice of variant), or `None` for an empty input.
pub(crate) fn split_first(data: &[u8]) -> Option<(u8, &[u8])> {
    data.split_first().map(|(b, rest)| (*b, rest))
}
