//! Commands that move whole queues or stores: export, import, check, backup.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use postbox::{ErrorKind, MessageState, Queue, Store};
use serde_json::json;

use super::act::{progress, target_queue};
use super::inspect::to_json;
use super::record::{Record, count};
use super::{open_store, open_with};
use crate::fail::{self, Failure, Outcome};
use crate::io::stopping;

/// The name `export` writes for a state.
fn state_name(state: MessageState) -> &'static str {
    match state {
        MessageState::Active => "active",
        MessageState::Locked => "locked",
        MessageState::Scheduled => "scheduled",
        MessageState::Deferred => "deferred",
        _ => "other",
    }
}

/// `postbox export`: every message of the queue, whatever its state, in id order, as JSON
/// Lines to `file` (created mode 0600, see [`crate::io::create_private`]) or standard output.
pub fn export(q: &Queue, file: Option<&Path>, limit: Option<usize>, as_json: bool) -> Outcome {
    let counts = q.stats()?;
    let total = counts.active + counts.locked + counts.scheduled + counts.deferred;
    let want = limit.map_or(total, |n| total.min(n as u64));
    let sink: Box<dyn Write> = match file {
        Some(path) => Box::new(
            crate::io::create_private(path)
                .map_err(|e| Failure::store(format!("cannot create {}: {e}", path.display())))?,
        ),
        None => crate::io::stdout(),
    };
    let mut out = BufWriter::new(sink);
    let bar = progress(Some(want), &format!("exporting {}", q.name()));
    let mut n = 0u64;
    let mut by_state: BTreeMap<&'static str, u64> = BTreeMap::new();
    for item in q.browse_all().take(limit.unwrap_or(usize::MAX)) {
        if stopping() {
            out.flush()?;
            bar.abandon();
            return Err(Failure::interrupted(format!(
                "exporting {n} messages (the output holds them, each line whole)"
            )));
        }
        let (env, state) = item?;
        let mut record = Record::from_envelope(&env);
        record.state = Some(state_name(state).to_owned());
        writeln!(out, "{}", to_json(&record)?)?;
        *by_state.entry(state_name(state)).or_default() += 1;
        n += 1;
        bar.inc(1);
    }
    out.flush()?;
    drop(out);
    bar.finish_and_clear();
    let to = file.map_or("standard output".into(), |p| p.display().to_string());
    // The summary goes to standard error: standard output may be the export itself.
    if as_json {
        tell!(
            "{}",
            json!({ "queue": q.name(), "exported": n, "by_state": by_state })
        );
    } else {
        let states: Vec<String> = by_state.iter().map(|(k, v)| format!("{v} {k}")).collect();
        tell!(
            "exported {} from {} to {to} ({})",
            count(n, "message"),
            q.name(),
            if states.is_empty() {
                "none".to_owned()
            } else {
                states.join(", ")
            }
        );
    }
    Ok(())
}

/// Messages per commit in `import`.
const IMPORT_BATCH: usize = 256;

/// `postbox import`: sends the records of a JSON Lines file (or standard input), in
/// batches of [`IMPORT_BATCH`] per commit.
pub fn import(
    store: &Store,
    queue: &str,
    file: Option<&Path>,
    create: bool,
    as_json: bool,
) -> Outcome {
    let q = target_queue(store, queue, create)?;
    let (reader, len): (Box<dyn BufRead>, Option<u64>) = match file {
        Some(path) => {
            let f = File::open(path)
                .map_err(|e| Failure::not_found(format!("cannot read {}: {e}", path.display())))?;
            let len = f.metadata().ok().map(|m| m.len());
            (Box::new(BufReader::new(f)), len)
        }
        None => (Box::new(BufReader::new(crate::io::stdin())), None),
    };
    let bar = progress(len, &format!("importing into {queue}"));
    let now = SystemTime::now();
    let (mut sent, mut duplicates) = (0u64, 0u64);
    let mut batch = Vec::with_capacity(IMPORT_BATCH);
    let mut line_no = 0u64;
    let mut bytes_done = 0u64;
    let flush = |batch: &mut Vec<postbox::Message>, sent: &mut u64, dups: &mut u64| {
        if batch.is_empty() {
            return Ok::<(), Failure>(());
        }
        let results = q.send_batch_checked(std::mem::take(batch)).map_err(|e| {
            let f = Failure::from(e);
            Failure::new(
                f.code,
                format!("{f}; the {sent} messages before this batch were imported"),
            )
        })?;
        for r in results {
            if r.duplicate {
                *dups += 1;
            } else {
                *sent += 1;
            }
        }
        Ok(())
    };
    for line in reader.lines() {
        let line = line?;
        line_no += 1;
        bytes_done += line.len() as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(&line).map_err(|e| {
            Failure::usage(format!(
                "line {line_no}: not a message record: {e}; the {} messages before it were imported",
                sent + duplicates
            ))
        })?;
        let msg = record.to_message(now).map_err(|f| {
            Failure::new(
                f.code,
                format!(
                    "line {line_no}: {f}; the {} messages before it were imported",
                    sent + duplicates
                ),
            )
        })?;
        batch.push(msg);
        if batch.len() >= IMPORT_BATCH {
            flush(&mut batch, &mut sent, &mut duplicates)?;
            if len.is_some() {
                bar.set_position(bytes_done);
            } else {
                bar.set_position(sent + duplicates);
            }
            if stopping() {
                bar.abandon();
                return Err(Failure::interrupted(format!(
                    "importing {} messages (lines 1 to {line_no})",
                    sent + duplicates
                )));
            }
        }
    }
    flush(&mut batch, &mut sent, &mut duplicates)?;
    bar.finish_and_clear();
    if as_json {
        say!(
            "{}",
            json!({ "queue": queue, "imported": sent, "duplicates": duplicates })
        );
    } else {
        say!("imported {} into {queue}", count(sent, "message"));
        if duplicates > 0 {
            say!("{duplicates} were duplicates (their key is in the dedup window): skipped");
        }
    }
    Ok(())
}

/// What `check` found.
struct Walk {
    queues: u64,
    messages: u64,
    dead_letters: u64,
}

/// Reads every queue's counts and every receivable message and dead letter: each record is
/// checksummed, so a damaged one fails here.
fn walk(store: &Store) -> Outcome<Walk> {
    let mut w = Walk {
        queues: 0,
        messages: 0,
        dead_letters: 0,
    };
    for name in store.queues()? {
        if stopping() {
            return Err(Failure::interrupted(format!(
                "checking {} queues",
                w.queues
            )));
        }
        let q = match store.open_queue(&name) {
            Ok(q) => q,
            Err(e) if e.kind() == ErrorKind::QueueNotFound => continue,
            Err(e) => return Err(e.into()),
        };
        q.stats()?;
        q.options()?;
        for env in q.browse() {
            env?;
            w.messages += 1;
        }
        let dlq = q.dead_letters()?;
        for env in dlq.browse() {
            env?;
            w.dead_letters += 1;
        }
        w.queues += 1;
    }
    store.topics()?;
    Ok(w)
}

/// `postbox check`: opens the store with every page verified, then reads it through.
pub fn check(path: &Path, as_json: bool) -> Outcome {
    let store = open_with(
        path,
        Store::builder().multi_process(true).verify_on_open(true),
    )
    .map_err(|f| match f.code {
        fail::STORE => Failure::store(format!("check failed: {f}")),
        _ => f,
    })?;
    let w = walk(&store).map_err(|f| match f.code {
        fail::STORE => Failure::store(format!("check failed: {f}")),
        _ => f,
    })?;
    if as_json {
        say!(
            "{}",
            json!({ "ok": true, "queues": w.queues, "messages": w.messages, "dead_letters": w.dead_letters })
        );
    } else {
        say!(
            "ok: every page verified; {} queues, {} receivable messages and {} dead letters read",
            w.queues,
            w.messages,
            w.dead_letters
        );
    }
    Ok(())
}

/// Copies taken before giving up: each retry follows a copy that a concurrent commit tore.
const BACKUP_TRIES: u32 = 5;

fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// Copies the store file, then proves the copy is one committed state of the store by
/// opening it with every page verified and reading it through; a copy torn by a concurrent
/// commit fails that proof and is taken again. See docs/design.md § Command-line tool.
pub fn backup(path: &Path, dest: &Path, force: bool, as_json: bool) -> Outcome {
    if dest.exists() && !force {
        return Err(Failure::usage(format!(
            "{} exists (--force replaces it)",
            dest.display()
        )));
    }
    // Holding the store open in multi-process mode replays a crashed single-process store's
    // log into the file and keeps single-process openers, which would write through a log the
    // copy cannot see, out until the copy is made.
    let store = open_store(path)?;
    let partial = partial_path(dest);
    let mut last = String::new();
    for attempt in 1..=BACKUP_TRIES {
        if stopping() {
            let _ = std::fs::remove_file(&partial);
            return Err(Failure::interrupted("nothing: no backup was written"));
        }
        let bytes = copy_synced(store.path(), &partial)?;
        let verified = open_with(
            &partial,
            Store::builder().verify_on_open(true).write_ahead_log(false),
        )
        .and_then(|copy| {
            let w = walk(&copy)?;
            copy.close()?;
            Ok(w)
        });
        match verified {
            Ok(w) => {
                std::fs::rename(&partial, dest).map_err(|e| {
                    Failure::store(format!("cannot move the copy to {}: {e}", dest.display()))
                })?;
                if as_json {
                    say!(
                        "{}",
                        json!({ "backup": dest.display().to_string(), "bytes": bytes, "queues": w.queues, "messages": w.messages, "attempts": attempt })
                    );
                } else {
                    say!(
                        "backed up {} to {} ({bytes} bytes, {} queues, {} receivable messages; verified)",
                        path.display(),
                        dest.display(),
                        w.queues,
                        w.messages
                    );
                }
                return Ok(());
            }
            Err(f) if f.code == fail::STORE => last = f.message,
            Err(f) => {
                let _ = std::fs::remove_file(&partial);
                return Err(f);
            }
        }
    }
    let _ = std::fs::remove_file(&partial);
    Err(Failure::store(format!(
        "no copy verified in {BACKUP_TRIES} tries (torn by concurrent commits, or damage in the store): {last}"
    )))
}

fn copy_synced(from: &Path, to: &Path) -> Outcome<u64> {
    let n = std::fs::copy(from, to)
        .map_err(|e| Failure::store(format!("cannot copy to {}: {e}", to.display())))?;
    // Open for writing: Windows flushes only a handle that may write.
    std::fs::OpenOptions::new()
        .write(true)
        .open(to)?
        .sync_all()?;
    Ok(n)
}

/// `postbox compact`: gives the space of deleted queues and purged messages back to the file
/// system (`Store::compact`).
pub fn compact(store: &Store, as_json: bool) -> Outcome {
    let s = store.compact()?;
    if as_json {
        say!(
            "{}",
            json!({
                "store": store.path().display().to_string(),
                "bytes_before": s.bytes_before,
                "bytes_after": s.bytes_after,
            })
        );
    } else {
        say!(
            "compacted {}: {} → {} bytes ({} freed)",
            store.path().display(),
            s.bytes_before,
            s.bytes_after,
            s.bytes_before.saturating_sub(s.bytes_after)
        );
    }
    Ok(())
}
