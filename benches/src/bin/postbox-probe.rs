//! The machine's durable-commit ceiling and the raw redb floor, for the comparison table.
//!
//! `postbox-probe DIR [SECONDS]` prints one JSON line: fdatasync/s of 1 KiB appends in DIR
//! (and of 1 KiB rewritten in place),
//! and inserts/s of raw redb with 1, 8, 32 and 100 inserts per durable transaction.

use std::time::Duration;

use postbox_benches as pb;
use serde_json::json;

fn main() {
    let mut args = std::env::args().skip(1);
    let root = args.next().map_or_else(pb::bench_root, Into::into);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let dir = tempfile::Builder::new()
        .prefix("postbox-probe-")
        .tempdir_in(root)
        .expect("temp dir");
    let fsync = pb::fsync_probe(dir.path(), Duration::from_secs_f64(secs));
    let overwrite = pb::fsync_probe_overwrite(dir.path(), Duration::from_secs_f64(secs / 2.0));
    let body = pb::body(1024);
    let raw: serde_json::Map<String, serde_json::Value> = [1usize, 8, 32, 100]
        .into_iter()
        .map(|n| {
            let rate = pb::raw_redb_rate(
                dir.path(),
                false,
                n,
                &body,
                Duration::from_secs_f64(secs / 2.0),
            );
            (n.to_string(), json!(rate))
        })
        .collect();
    println!(
        "{}",
        json!({"fsync_per_s": fsync, "fsync_overwrite_per_s": overwrite, "raw_redb_inserts_per_s": raw})
    );
}
