//! The Rust side of the C test suite (driven by `tests/c/cross_process.sh` and `.ci/c.sh`).
//!
//! - `pbx_peer produce STORE QUEUE FROM TO`: sends the bodies `FROM`..`TO` (decimal text) to a
//!   multi-process store, one durable send each.
//! - `pbx_peer consume STORE QUEUE OUT IDLE_MS`: receives and completes messages until none
//!   arrives for `IDLE_MS`, appending each body as a line to `OUT` *before* completing it (so a
//!   duplicate delivery would show up as a duplicate line).
//! - `pbx_peer bump-format STORE`: rewrites the store's format version to one above what this
//!   build supports, to test `POSTBOX_INCOMPATIBLE_VERSION` from C.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use postbox::Store;
use redb::ReadableTable;

fn open(path: &str) -> postbox::Result<Store> {
    Store::builder().multi_process(true).open(path)
}

fn produce(path: &str, queue: &str, from: u64, to: u64) -> postbox::Result<()> {
    let store = open(path)?;
    let q = store.queue(queue)?;
    for i in from..to {
        q.send(i.to_string().as_str())?;
    }
    store.close()
}

fn consume(path: &str, queue: &str, out: &str, idle_ms: u64) -> postbox::Result<()> {
    let store = open(path)?;
    let q = store.queue(queue)?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)?;
    let mut n = 0u64;
    while let Some(m) = q.receive(Duration::from_millis(idle_ms))? {
        file.write_all(m.body())?;
        file.write_all(b"\n")?;
        m.complete()?;
        n += 1;
    }
    file.sync_all()?;
    eprintln!("pbx_peer: consumed {n} messages");
    store.close()
}

/// CRC32C (Castagnoli), bit by bit: the check the engine writes beside the format version
/// (`format_check` in core/src/engine/tables.rs). Slow, and only ever run on 8 bytes.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn bump_format(path: &str) -> Result<(), Box<dyn std::error::Error>> {
    // The table and keys are the engine's (core/src/engine/tables.rs); this helper exists only
    // to fabricate a "newer version" store for the C tests. A newer postbox writes its version
    // with a matching check; a version without one reads as damage (POSTBOX_CORRUPTED).
    const META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("postbox.meta");
    assert_eq!(crc32c(b"123456789"), 0xE306_9283, "CRC32C check value");
    let db = redb::Database::open(path)?;
    let txn = db.begin_write()?;
    {
        let mut meta = txn.open_table(META)?;
        let current = meta.get("format_version")?.map_or(0, |v| v.value());
        let newer = current + 1;
        meta.insert("format_version", newer)?;
        meta.insert(
            "format_version_crc",
            u64::from(crc32c(&newer.to_le_bytes())),
        )?;
    }
    txn.commit()?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize| args.get(i).and_then(|s| s.parse::<u64>().ok());
    let result: Result<(), Box<dyn std::error::Error>> = match args.get(1).map(String::as_str) {
        Some("produce") if args.len() == 6 => match (num(4), num(5)) {
            (Some(from), Some(to)) => produce(&args[2], &args[3], from, to).map_err(Into::into),
            _ => Err("FROM and TO must be numbers".into()),
        },
        Some("consume") if args.len() == 6 => match num(5) {
            Some(idle) => consume(&args[2], &args[3], &args[4], idle).map_err(Into::into),
            None => Err("IDLE_MS must be a number".into()),
        },
        Some("bump-format") if args.len() == 3 => bump_format(&args[2]),
        _ => Err("usage: pbx_peer produce STORE QUEUE FROM TO | consume STORE QUEUE OUT IDLE_MS | bump-format STORE".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pbx_peer: {e}");
            ExitCode::FAILURE
        }
    }
}
