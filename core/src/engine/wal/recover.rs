//! Recovery at open: what a store needs of its log, whether the log beside it is that log, and
//! replaying it (`docs/design.md` § Write-ahead log, "What the store knows of its log").
//!
//! The store file records, in every checkpoint's durable commit, its identity, the last record
//! it holds (`applied`), the cycle the log is in (`cycle`, 0 once the log is not needed: after
//! a clean close or a recovery) and the log's length when that cycle began. The log's header
//! names the store and the cycle (and the cycle before it, while the checkpoint that ends it
//! has not committed). So a store that was not closed cleanly knows that it needs a log, whose
//! it must be, which cycle, and how long it was at least — and refuses to open (`Corrupted`)
//! when the log is missing, cut, damaged, another store's or of another cycle, unless the
//! caller accepts the loss.

use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use redb::{Database, ReadableTable, WriteTransaction};

use super::format::{self, Chain, HEADER, Header, Parsed};
use super::{Wal, kinds, log_error};
use crate::engine::tables::{KEY_LOG_APPLIED, KEY_LOG_CYCLE, KEY_LOG_LENGTH, KEY_STORE_ID, META};
use crate::error::{Error, Result};
use crate::storage::LogFile;

/// The longest log an open reads (see [`recover`]).
const MAX_LOG_LEN: u64 = 1 << 30;

/// What the store file says of its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLog {
    /// The store's identity; `None` for a store written before identities (format 5 and
    /// older), which is upgraded after its log (of format 1) is replayed.
    pub id: Option<u64>,
    /// The last record the store holds durably.
    pub applied: u64,
    /// The cycle the log was in at the last checkpoint; 0 when the store needs no log.
    pub cycle: u64,
    /// The log's length when that cycle began: it never shrinks below it while needed.
    pub length: u64,
}

impl StoreLog {
    /// Reads it in `txn`.
    ///
    /// # Errors
    ///
    /// redb's errors.
    pub fn read(txn: &WriteTransaction) -> Result<StoreLog> {
        let meta = txn.open_table(META)?;
        let get = |k: &str| -> Result<Option<u64>> { Ok(meta.get(k)?.map(|g| g.value())) };
        Ok(StoreLog {
            id: get(KEY_STORE_ID)?,
            applied: get(KEY_LOG_APPLIED)?.unwrap_or(0),
            cycle: get(KEY_LOG_CYCLE)?.unwrap_or(0),
            length: get(KEY_LOG_LENGTH)?.unwrap_or(0),
        })
    }
}

/// Records in `txn` that the store holds every record up to `seq` and that the log is in
/// `cycle` (0: not needed) with at least `length` bytes.
///
/// # Errors
///
/// redb's errors.
pub fn mark(txn: &WriteTransaction, seq: u64, cycle: u64, length: u64) -> Result<()> {
    let mut meta = txn.open_table(META)?;
    meta.insert(KEY_LOG_APPLIED, seq)?;
    meta.insert(KEY_LOG_CYCLE, cycle)?;
    meta.insert(KEY_LOG_LENGTH, length)?;
    Ok(())
}

/// Records in a logged batch's own transaction that the store holds record `seq`: replaying
/// a logical record is not idempotent (it runs operations again), so replay must skip one
/// whose batch the store file kept — redb keeps non-durable commits when the database is
/// dropped after a failed write, and the store reopens.
///
/// # Errors
///
/// redb's errors.
pub fn mark_applied(txn: &WriteTransaction, seq: u64) -> Result<()> {
    txn.open_table(META)?.insert(KEY_LOG_APPLIED, seq)?;
    Ok(())
}

/// Records in `txn` (the commit that registers this process at open, or a reopen's that
/// started a new cycle) the cycle the log `wal` starts in: from then on the store needs that
/// log until a checkpoint or a clean close.
///
/// # Errors
///
/// redb's errors.
pub fn mark_started(txn: &WriteTransaction, wal: &Wal) -> Result<()> {
    let (cycle, capacity) = wal.cycle_and_capacity();
    let mut meta = txn.open_table(META)?;
    meta.insert(KEY_LOG_CYCLE, cycle)?;
    meta.insert(KEY_LOG_LENGTH, capacity)?;
    Ok(())
}

/// Before a checkpoint's durable commit in `txn`: every record so far is applied by it, the
/// log's header announces the next cycle (synced), and the store records that cycle — or, when
/// `closing`, that it needs no log any more. After the commit, call [`Wal::reset`].
///
/// # Errors
///
/// The log's I/O errors writing its header (the log then takes nothing more and the store
/// reopens); redb's errors.
pub fn checkpoint(txn: &WriteTransaction, wal: &Wal, closing: bool) -> Result<()> {
    let seq = wal.last_seq();
    if closing {
        return mark(txn, seq, 0, 0);
    }
    let (cycle, capacity) = wal.begin_cycle()?;
    mark(txn, seq, cycle, capacity)
}

/// How [`recover`] runs.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Commit the replay durably, after which the log is not needed (an open); without, the
    /// log stays authoritative and goes on (a reopen after a failed write, when the disk may
    /// be full).
    pub durable: bool,
    /// With `durable`: when the log is this store's current one, whole and in use (not
    /// between two cycles), replay without a durable commit anyway and keep the log
    /// authoritative, so that the open does not wait for redb to write and sync every page
    /// the replay touched; the first checkpoint does that (see [`Recovered::kept_log`]).
    pub keep_log: bool,
    /// Open even when the log the store needs is missing or damaged: replay what can be
    /// verified and report the rest as lost (`StoreBuilder::accept_log_loss`).
    pub accept_loss: bool,
    /// How logical records are replayed (`engine::logical::replay`).
    pub logical: kinds::LogicalReplay,
}

/// What the log beside the store is, when it is not needed and not this store's current log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aside {
    /// Another store's log, a damaged or older-format one, beside a store that needs none:
    /// moved aside as `-log.stray-<time>` (a new store never replays a log it did not write).
    Stray,
    /// The damaged log of a store opened with `accept_loss`: kept as `-log.damaged-<time>`.
    Damaged,
}

/// What recovery did at open.
#[derive(Debug, Default, Clone)]
pub struct Recovered {
    /// Records replayed into the store.
    pub records: u64,
    /// The sequence number of the last record the store holds.
    pub applied: u64,
    /// Where the log's chain of valid records ends (for [`Wal::resume`]).
    pub end: u64,
    /// The cycle the chain belongs to, which a resumed log goes on in.
    pub cycle: u64,
    /// The log's header, when it is this store's.
    pub header: Option<Header>,
    /// With `accept_loss`: what the store needed and could not get from its log.
    pub loss: Option<String>,
    /// The log file must be moved aside, and why.
    pub aside: Option<(Aside, String)>,
    /// The replay was committed without a sync and the log stays in use, in its cycle: the
    /// caller goes on with it ([`Wal::resume`]) and logs its own first commit.
    pub kept_log: bool,
    /// The store held a record its log lacks: the replay was committed durably even without
    /// `durable`, and the log must start a new cycle rather than go on ([`Wal::resume`]).
    pub restarts_log: bool,
    pub took: Duration,
}

/// What to replay, decided from the store's record and the log's bytes.
#[derive(Debug, Default)]
struct Plan {
    bodies: Vec<(u64, Range<usize>)>,
    last: Option<u64>,
    end: usize,
    cycle: u64,
    header: Option<Header>,
    aside: Option<(Aside, String)>,
}

impl Plan {
    fn from_chain(chain: &Chain, applied: u64, cycle: u64, header: Option<Header>) -> Plan {
        Plan {
            bodies: chain
                .past(applied)
                .map(|f| (f.seq, f.body.clone()))
                .collect(),
            last: chain.last(),
            end: chain.end,
            cycle,
            header,
            aside: None,
        }
    }

    fn nothing(cycle: u64, header: Option<Header>) -> Plan {
        Plan {
            end: HEADER as usize,
            cycle,
            header,
            ..Plan::default()
        }
    }

    fn aside(why: Aside, text: String) -> Plan {
        Plan {
            end: HEADER as usize,
            aside: Some((why, text)),
            ..Plan::default()
        }
    }
}

/// Why the log the store needs cannot be used; `salvage` is what can still be replayed.
#[derive(Debug)]
struct Problem {
    text: String,
    salvage: Box<Plan>,
}

/// Decides what to replay. `data` is the log's whole file (`None`: there is none).
fn plan(st: &StoreLog, data: Option<&[u8]>, log: &Path) -> std::result::Result<Plan, Problem> {
    let Some(id) = st.id else {
        return legacy_plan(st, data, log);
    };
    let need = st.cycle != 0;
    let problem = |text: String| {
        // What can still be verified: the records of the cycle the store names, under its
        // own identity, however the header looks.
        let salvage = match data {
            Some(d) => format::chain(d, format::salt(id, st.cycle), Some(st.cycle))
                .map(|c| {
                    let mut p = Plan::from_chain(&c, st.applied, st.cycle, None);
                    p.aside = Some((Aside::Damaged, text.clone()));
                    p
                })
                .unwrap_or_else(|_| Plan::aside(Aside::Damaged, text.clone())),
            None => Plan::nothing(0, None),
        };
        Problem {
            text,
            salvage: Box::new(salvage),
        }
    };
    let Some(data) = data else {
        return if need {
            Err(problem(format!(
                "the write-ahead log {} is missing",
                log.display()
            )))
        } else {
            Ok(Plan::nothing(0, None))
        };
    };
    let header = match Header::parse(data) {
        Parsed::Current(h) if h.store == id => h,
        Parsed::Absent if !need => return Ok(Plan::nothing(0, None)),
        found => {
            let what = match found {
                Parsed::Current(h) => format!(
                    "belongs to another store (identity {:016x}; this store is {id:016x})",
                    h.store
                ),
                Parsed::Legacy => "is a log of an older postbox (format 1)".to_owned(),
                Parsed::Absent => "has no header (zeroed, or cut to nothing)".to_owned(),
                Parsed::Damaged => "has a damaged header".to_owned(),
            };
            let text = format!("the write-ahead log {} {what}", log.display());
            return if need {
                Err(problem(text))
            } else {
                Ok(Plan::aside(Aside::Stray, text))
            };
        }
    };
    if !need {
        // This store's own log, left by a clean close or a recovery: every record in it is
        // applied.
        return Ok(Plan::nothing(0, Some(header)));
    }
    let len = data.len() as u64;
    let written = st.length.max(header.capacity);
    if len < written {
        return Err(problem(format!(
            "the write-ahead log {} is {len} bytes, shorter than the {written} bytes written to it (cut or truncated)",
            log.display()
        )));
    }
    let from = |cycle: u64| -> std::result::Result<Chain, Problem> {
        let chain = format::chain(data, format::salt(id, cycle), Some(cycle))
            .map_err(|e| problem(format!("in {}: {e}", log.display())))?;
        match &chain.hidden {
            Some(hidden) => Err(problem(format!(
                "in the write-ahead log {}, {hidden}: acknowledged records cannot be replayed",
                log.display()
            ))),
            None => Ok(chain),
        }
    };
    if header.cycle == st.cycle {
        let chain = from(st.cycle)?;
        return Ok(Plan::from_chain(&chain, st.applied, st.cycle, Some(header)));
    }
    if header.prev != 0 && header.prev == st.cycle {
        // A checkpoint wrote the next cycle's header but did not commit: the slots still hold
        // the cycle the store names, up to at least the last record before that checkpoint.
        let chain = from(st.cycle)?;
        if chain.last().unwrap_or(0) < header.prev_end {
            return Err(problem(format!(
                "the write-ahead log {} holds records up to {}, but it had reached record {}",
                log.display(),
                chain.last().unwrap_or(0),
                header.prev_end
            )));
        }
        return Ok(Plan::from_chain(&chain, st.applied, st.cycle, Some(header)));
    }
    Err(problem(format!(
        "the write-ahead log {} is of another cycle: it holds records from {} on, but the store needs the cycle from record {} on (a copy of the log from another time?)",
        log.display(),
        header.cycle,
        st.cycle
    )))
}

/// The log beside a store of format 5 or older (no identity): a log of format 1 is replayed
/// as that format was; any other log is not this store's.
fn legacy_plan(
    st: &StoreLog,
    data: Option<&[u8]>,
    log: &Path,
) -> std::result::Result<Plan, Problem> {
    let Some(data) = data else {
        return Ok(Plan::nothing(0, None));
    };
    match Header::parse(data) {
        Parsed::Absent => Ok(Plan::nothing(0, None)),
        Parsed::Legacy => match format::legacy_chain(data, st.applied) {
            Ok(chain) => Ok(Plan::from_chain(&chain, st.applied, 0, None)),
            Err(e) => Err(Problem {
                text: format!("in {}: {e}", log.display()),
                salvage: Box::new(Plan::aside(Aside::Damaged, e.to_string())),
            }),
        },
        Parsed::Current(_) => Ok(Plan::aside(
            Aside::Stray,
            format!(
                "the write-ahead log {} was written by a later postbox for another store",
                log.display()
            ),
        )),
        Parsed::Damaged => Err(Problem {
            text: format!(
                "the write-ahead log {}'s header is damaged or of an unknown version",
                log.display()
            ),
            salvage: Box::new(Plan::aside(Aside::Damaged, "damaged header".into())),
        }),
    }
}

/// What a refusal adds: how to open the store anyway.
const HOW_TO_ACCEPT: &str = "to open the store anyway and give up the work that only that log held, open it with the accept-log-loss option (Rust StoreBuilder::accept_log_loss(true), C postbox_store_options.accept_log_loss = 1, Python Store(path, accept_log_loss=True)) or run `postbox recover STORE`";

/// Replays the records of the log in `file` that `db` does not hold, in one write transaction,
/// after checking that the log is the one the store needs (see the module's docs).
/// Idempotent: records rewrite whole rows, so replaying one the store already holds changes
/// nothing, and a crash part way leaves the store as it was for the next open to replay again.
///
/// # Errors
///
/// `Corrupted` when the store needs its log and the log is missing, cut, damaged (a damaged
/// record followed by a valid later one), another store's or of another cycle — unless
/// `opts.accept_loss`; the file system's and redb's errors.
pub fn recover(
    db: &Database,
    file: Option<&dyn LogFile>,
    store: &Path,
    log: &Path,
    opts: Options,
) -> Result<Recovered> {
    let started = Instant::now();
    // The store's record is read in the write transaction, and the log after it began: in a
    // shared store, a process that recovered first commits `cycle = 0` before it removes the
    // log, so a missing log is never mistaken for a lost one.
    let mut txn = db.begin_write()?;
    let st = StoreLog::read(&txn)?;
    let data = file.map(read_whole).transpose()?;
    let mut loss = None;
    let plan = match plan(&st, data.as_deref(), log) {
        Ok(p) => p,
        Err(problem) if opts.accept_loss => {
            let p = *problem.salvage;
            let replayed = match (p.bodies.first(), p.bodies.last()) {
                (Some((a, _)), Some((b, _))) => format!("replayed records {a} to {b}"),
                _ => "replayed nothing".to_owned(),
            };
            let text = format!(
                "{} was not closed cleanly and needs its write-ahead log from record {}: {}; {replayed}; whatever was acknowledged after the last record replayed is lost",
                store.display(),
                st.applied + 1,
                problem.text
            );
            tracing::warn!(store = %store.display(), loss = %text, "opened with accept_log_loss");
            loss = Some(text);
            p
        }
        Err(problem) => {
            txn.abort()?;
            return Err(Error::Corrupted(format!(
                "{} was not closed cleanly and needs its write-ahead log from record {} on (everything acknowledged since the last checkpoint), but {}; {HOW_TO_ACCEPT}",
                store.display(),
                st.applied + 1,
                problem.text
            )));
        }
    };
    let records = plan.bodies.len() as u64;
    let applied = plan.bodies.last().map_or(st.applied, |(s, _)| *s);
    let keep = opts.durable
        && opts.keep_log
        && records > 0
        && loss.is_none()
        && plan.aside.is_none()
        && st.cycle != 0
        && plan.cycle == st.cycle
        && plan
            .header
            .is_some_and(|h| h.cycle == st.cycle && h.prev == 0);
    // The store holds a record of this cycle that the log lacks: a batch applied while its
    // record's write failed (`Wal::stage` writes with the sync, as the batch runs). A log that
    // went on in this cycle would hold a hole a later recovery refuses: the replay commits
    // durably and the log starts a new cycle instead.
    let ahead = st.cycle != 0 && st.applied >= st.cycle && st.applied > plan.last.unwrap_or(0);
    let durable = (opts.durable || ahead) && !keep;
    let mut wrote = false;
    if let Some(data) = &data
        && records > 0
    {
        let bodies: Vec<(u64, &[u8])> = plan
            .bodies
            .iter()
            .map(|(seq, b)| (*seq, &data[b.clone()]))
            .collect();
        kinds::replay(&txn, &bodies, opts.logical)?;
        wrote = true;
    }
    if durable && (wrote || st.cycle != 0 || loss.is_some()) {
        // Everything the log held is in the store now: it needs no log until the next one
        // starts.
        mark(&txn, applied, 0, 0)?;
        wrote = true;
    } else if wrote {
        txn.open_table(META)?.insert(KEY_LOG_APPLIED, applied)?;
    }
    if wrote {
        if !durable {
            txn.set_durability(redb::Durability::None)
                .map_err(|e| Error::Config(e.to_string()))?;
        }
        txn.commit()?;
    } else {
        txn.abort()?;
    }
    Ok(Recovered {
        records,
        applied: applied.max(plan.last.unwrap_or(0)),
        end: plan.end as u64,
        cycle: plan.cycle,
        header: plan.header,
        loss,
        aside: plan.aside,
        kept_log: keep,
        restarts_log: ahead,
        took: started.elapsed(),
    })
}

/// Reads a whole log file, refusing one far larger than postbox writes before allocating.
fn read_whole(file: &dyn LogFile) -> Result<Vec<u8>> {
    let len = file
        .size()
        .map_err(|e| log_error("reading its length", e))?;
    // postbox never lets the log grow past about the checkpoint bound (32 MiB) and one record,
    // so a far larger file is not one of its logs and must not size an allocation.
    if len > MAX_LOG_LEN {
        return Err(Error::corrupted(format!(
            "the write-ahead log is {len} bytes, more than postbox writes ({MAX_LOG_LEN})"
        )));
    }
    let mut data = vec![0u8; usize::try_from(len).map_err(|_| Error::corrupted("log too large"))?];
    let got = file
        .read_at(&mut data, 0)
        .map_err(|e| log_error("reading it", e))?;
    data.truncate(got);
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::wal::format::{frame, salt};

    const ID: u64 = 0x1234;

    fn log_with(header: Header, cycle_salt: (u64, u64), seqs: &[u64]) -> Vec<u8> {
        let mut data = header.page();
        for &seq in seqs {
            frame(
                &mut data,
                salt(cycle_salt.0, cycle_salt.1),
                seq,
                &[seq as u8; 40],
            );
            data.resize(data.len().next_multiple_of(8), 0);
        }
        data.resize(header.capacity as usize, 0);
        data
    }

    fn header(cycle: u64, prev: u64, prev_end: u64) -> Header {
        Header {
            store: ID,
            cycle,
            prev,
            prev_end,
            capacity: 64 << 10,
        }
    }

    fn store(applied: u64, cycle: u64) -> StoreLog {
        StoreLog {
            id: Some(ID),
            applied,
            cycle,
            length: 64 << 10,
        }
    }

    fn seqs(p: &Plan) -> Vec<u64> {
        p.bodies.iter().map(|(s, _)| *s).collect()
    }

    const P: &str = "s-log";

    #[test]
    fn the_current_cycle_is_replayed_past_the_store() {
        let data = log_with(header(11, 0, 0), (ID, 11), &[11, 12, 13]);
        let p = plan(&store(10, 11), Some(&data), Path::new(P)).unwrap();
        assert_eq!(seqs(&p), [11, 12, 13]);
        assert_eq!(p.cycle, 11);
    }

    #[test]
    fn an_interrupted_checkpoint_replays_the_cycle_before() {
        // The header already names cycle 14; the store still names 11.
        let data = log_with(header(14, 11, 13), (ID, 11), &[11, 12, 13]);
        let p = plan(&store(10, 11), Some(&data), Path::new(P)).unwrap();
        assert_eq!(seqs(&p), [11, 12, 13]);
        // And it committed: nothing left to replay.
        let p = plan(&store(13, 14), Some(&data), Path::new(P)).unwrap();
        assert!(p.bodies.is_empty());
    }

    #[test]
    fn missing_cut_zeroed_foreign_and_earlier_logs_are_refused() {
        let st = store(10, 11);
        let good = log_with(header(11, 0, 0), (ID, 11), &[11, 12]);
        let refused = |data: Option<&[u8]>| plan(&st, data, Path::new(P)).unwrap_err().text;
        assert!(refused(None).contains("missing"));
        assert!(refused(Some(&good[..4096])).contains("shorter"));
        assert!(refused(Some(&[])).contains("no header"));
        assert!(refused(Some(&vec![0; good.len()])).contains("no header"));
        let foreign = log_with(
            Header {
                store: 99,
                ..header(11, 0, 0)
            },
            (99, 11),
            &[11],
        );
        assert!(refused(Some(&foreign)).contains("another store"));
        let earlier = log_with(header(5, 0, 0), (ID, 5), &[5, 6, 7, 8, 9, 10]);
        assert!(refused(Some(&earlier)).contains("another cycle"));
        // The interrupted checkpoint's cycle must reach the record the header names.
        let short = log_with(header(14, 11, 13), (ID, 11), &[11, 12]);
        assert!(refused(Some(&short)).contains("reached record 13"));
    }

    #[test]
    fn a_store_that_needs_no_log_sets_others_aside_and_keeps_its_own() {
        let st = store(10, 0);
        let own = log_with(header(11, 0, 0), (ID, 11), &[11]);
        let p = plan(&st, Some(&own), Path::new(P)).unwrap();
        assert!(p.aside.is_none() && p.bodies.is_empty());
        let foreign = log_with(
            Header {
                store: 7,
                ..header(1, 0, 0)
            },
            (7, 1),
            &[1, 2, 3],
        );
        let p = plan(&st, Some(&foreign), Path::new(P)).unwrap();
        assert_eq!(p.aside.map(|a| a.0), Some(Aside::Stray));
        assert!(p.bodies.is_empty());
    }

    #[test]
    fn salvage_replays_what_verifies_under_the_stores_identity() {
        // The header is zeroed; the records are intact.
        let mut data = log_with(header(11, 0, 0), (ID, 11), &[11, 12, 13]);
        data[..64].fill(0);
        let problem = plan(&store(10, 11), Some(&data), Path::new(P)).unwrap_err();
        assert_eq!(seqs(&problem.salvage), [11, 12, 13]);
        // Cut inside record 13: 11 and 12 survive.
        let good = log_with(header(11, 0, 0), (ID, 11), &[11, 12, 13]);
        let cut = &good[..4096 + 2 * 64 + 30];
        let problem = plan(&store(10, 11), Some(cut), Path::new(P)).unwrap_err();
        assert_eq!(seqs(&problem.salvage), [11, 12]);
    }
}
