//! Simulated power loss. A recording layer sits between postbox and both of its files (the
//! store file, through redb's `StorageBackend`, and the write-ahead log). It keeps, for each
//! file, what the last completed sync made durable and the writes since. At every sync (the
//! moment before it completes, when everything since the previous one may still be lost) it
//! builds crash images — the durable contents plus none, all, a random subset, or random
//! 512-byte sectors of the writes since — writes each to a fresh directory and opens it as a
//! store, checking against what the workload had been told by then:
//!
//! - the open succeeds;
//! - every acknowledged send is there with its body; nothing whose completion or transaction
//!   was acknowledged is there (a message may be missing only when the operation taking it was
//!   in flight);
//! - a batch is all there or not at all; a transaction's follow-up is never there beside the
//!   message it consumed;
//! - the counts match, and a second open finds the same messages.
//!
//! The store is created under the same layer: until it is linked under its name, an image is
//! a half-built temporary file of a dead process beside no store, and opening must create a
//! working store and remove that file.
//!
//! The workload runs once with the default checkpoints and once with a checkpoint every
//! 16 KiB of log, so crashes land inside checkpoints too. Opening the committed fixtures of
//! formats 1–4 (an upgrade) runs under the same layer; there every image must hold exactly the
//! fixture's messages. Knobs: `POSTBOX_POWERLOSS_OPS`
//! (operations per run, default 60 × `POSTBOX_STRESS`), `POSTBOX_POWERLOSS_RUNS` (pairs of
//! runs, each on a fresh store, default 1), `POSTBOX_POWERLOSS_VARIANTS` (images per sync,
//! 1–4, default 4), `POSTBOX_SEED`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use postbox::{ErrorKind, Message, Store};
use postbox_testkit::{Rng, env_u64, stress};

#[path = "common/layer.rs"]
mod layer;
use layer::{Io, Tap, Which};

const SECTOR: usize = 512;

/// One change to a file since its last sync.
#[derive(Clone)]
enum Op {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Default)]
struct FileModel {
    durable: Vec<u8>,
    pending: Vec<Op>,
}

fn apply(image: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write(at, data) => {
            let at = *at as usize;
            if image.len() < at + data.len() {
                image.resize(at + data.len(), 0);
            }
            image[at..at + data.len()].copy_from_slice(data);
        }
        Op::SetLen(len) => image.resize(*len as usize, 0),
    }
}

impl FileModel {
    /// The file after a power loss now, by `variant`: 0 keeps none of the unsynced changes, 1
    /// all, 2 a random subset, 3 random sectors of each write.
    fn image(&self, variant: u64, rng: &mut Rng) -> Vec<u8> {
        let mut out = self.durable.clone();
        for op in &self.pending {
            match (variant, op) {
                (0, _) => {}
                (1, _) => apply(&mut out, op),
                (2, _) => {
                    if rng.below(2) == 0 {
                        apply(&mut out, op);
                    }
                }
                (_, Op::Write(at, data)) => {
                    // Sector by sector, as a disk may persist part of a write.
                    let mut p = 0;
                    while p < data.len() {
                        let sector_end = ((*at as usize + p) / SECTOR + 1) * SECTOR;
                        let end = (sector_end - *at as usize).min(data.len());
                        if rng.below(2) == 0 {
                            apply(&mut out, &Op::Write(*at + p as u64, data[p..end].to_vec()));
                        }
                        p = end;
                    }
                }
                (_, op) => apply(&mut out, op),
            }
        }
        out
    }

    fn synced(&mut self) {
        for op in std::mem::take(&mut self.pending) {
            apply(&mut self.durable, &op);
        }
    }
}

/// What the workload was told, in order.
#[derive(Clone, Debug)]
enum Ack {
    Sent(u64, String),
    /// A batch of three sends under one tag.
    Batch(String, Vec<u64>),
    /// A receive returned this message; its completion or transaction is about to run.
    Taking(u64),
    Completed(u64),
}

struct Sim {
    files: [Option<FileModel>; 2],
    acked: Vec<Ack>,
    rng: Rng,
    variants: u64,
    scratch: tempfile::TempDir,
    images: u64,
    replayed: u64,
    failures: Vec<String>,
    /// When set, the next log sync fails (and is not durable).
    fail_next_log_sync: bool,
    /// For a scenario that must not change what the store holds (opening, upgrading): what
    /// an image may read as instead of what the workload was told. Opening runs the store's
    /// maintenance (expired messages move) when it closes, so an image reads as the untouched
    /// store (`.0`) or as after one open (`.1`), and opened a second time, as after one open.
    expect: Option<(Contents, Contents)>,
    /// Where the store file is in its creation (the scenario opens a path with no store).
    creation: Creation,
    /// Images taken while the store was being created.
    creation_images: u64,
}

/// A new store is built under a temporary name, synced, then linked to its name: until the
/// link, a crash leaves no store at the path and a temporary file beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Creation {
    /// The store existed before the scenario opened it.
    None,
    /// The next store file opened is the temporary one.
    Expected,
    /// The writes and syncs seen are the temporary file's.
    Building,
    /// The store is linked under its name.
    Done,
}

/// Every queue's messages (and its dead letters), by queue name: id and body.
type Contents = BTreeMap<String, Vec<(u64, Vec<u8>)>>;

/// What the store at `path` holds, read through a plain open.
fn contents(path: &Path) -> Result<Contents, String> {
    let store = Store::open(path).map_err(|e| format!("open failed: {e}"))?;
    let mut out = Contents::new();
    let names = store.queues().map_err(|e| e.to_string())?;
    for name in names {
        let q = store.open_queue(&name).map_err(|e| e.to_string())?;
        for (key, q) in [
            (name.clone(), q.clone()),
            (
                format!("{name} (dead letters)"),
                q.dead_letters().map_err(|e| e.to_string())?,
            ),
        ] {
            let mut got = Vec::new();
            for m in q.browse() {
                let m = m.map_err(|e| format!("browse {key}: {e}"))?;
                got.push((m.id().get(), m.body().to_vec()));
            }
            out.insert(key, got);
        }
    }
    store.close().map_err(|e| format!("close: {e}"))?;
    Ok(out)
}

const STORE: usize = 0;
const LOG: usize = 1;

type Shared = Arc<Mutex<Sim>>;

impl Sim {
    fn new(seed_rng: &mut Rng, variants: u64) -> Shared {
        Arc::new(Mutex::new(Sim {
            files: [None, None],
            acked: Vec::new(),
            rng: Rng::new(seed_rng.next_u64()),
            variants,
            scratch: tempfile::tempdir().unwrap(),
            images: 0,
            replayed: 0,
            failures: Vec::new(),
            fail_next_log_sync: false,
            expect: None,
            creation: Creation::None,
            creation_images: 0,
        }))
    }

    /// Fails the test with the first images that did not recover.
    fn assert_no_failures(&self, what: &str) {
        assert!(
            self.failures.is_empty(),
            "{what}, {} images: {:#?}",
            self.images,
            self.failures
        );
    }

    fn track(&mut self, which: usize, file: &File) -> io::Result<()> {
        use std::io::Read;
        if which == STORE {
            self.creation = match self.creation {
                Creation::Expected => Creation::Building,
                Creation::Building => Creation::Done,
                other => other,
            };
        }
        let mut durable = Vec::new();
        (&*file).read_to_end(&mut durable)?;
        self.files[which] = Some(FileModel {
            durable,
            pending: Vec::new(),
        });
        Ok(())
    }

    fn record(&mut self, which: usize, op: Op) {
        if let Some(f) = &mut self.files[which] {
            f.pending.push(op);
        }
    }

    /// A power loss now, as the sync of `which` starts: checks each image.
    fn power_loss_now(&mut self, which: usize) {
        for variant in 0..self.variants {
            let mut images = Vec::new();
            for f in &self.files {
                images.push(f.as_ref().map(|f| f.image(variant, &mut self.rng)));
            }
            self.images += 1;
            if let Err(why) = self.check_image(&images)
                && self.failures.len() < 5
            {
                self.failures.push(format!(
                    "image {} (variant {variant}, at a sync of the {}): {why}",
                    self.images,
                    if which == STORE { "store file" } else { "log" }
                ));
            }
        }
    }

    fn check_image(&mut self, images: &[Option<Vec<u8>>]) -> Result<(), String> {
        let dir = self.scratch.path().join(format!("image-{}", self.images));
        std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
        let path = dir.join("s.postbox");
        if self.creation == Creation::Building {
            self.creation_images += 1;
            return check_creation_image(&dir, images[STORE].as_deref().unwrap_or_default());
        }
        let Some(store) = &images[STORE] else {
            return Ok(());
        };
        std::fs::write(&path, store).map_err(|e| e.to_string())?;
        if let Some(log) = &images[LOG] {
            std::fs::write(dir.join("s.postbox-log"), log).map_err(|e| e.to_string())?;
        }
        if let Some((untouched, opened)) = &self.expect {
            let first = contents(&path)?;
            if &first != untouched && &first != opened {
                return Err("the first open found other contents".into());
            }
            if &contents(&path)? != opened {
                return Err("the second open found other contents".into());
            }
        } else {
            let first = self.read_back(&path, true)?;
            let second = self.read_back(&path, false)?;
            if first != second {
                return Err("a second open found other messages".into());
            }
        }
        std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Opens the image and checks it against the acknowledgements; returns what it holds.
    fn read_back(&mut self, path: &Path, first: bool) -> Result<BTreeMap<u64, String>, String> {
        let store = match Store::open(path) {
            Ok(s) => s,
            // A crash before the new store file's first sync, when nothing was acknowledged:
            // the file may not be a store yet. (Both opens fail alike.)
            Err(e) if self.acked.is_empty() => return Ok(BTreeMap::from([(0, e.to_string())])),
            Err(e) => return Err(format!("open failed: {e}")),
        };
        if first {
            self.replayed += store.stats().replayed_records;
        }
        let mut present = BTreeMap::new();
        let q = match store.queue("q") {
            Ok(q) => q,
            Err(e) => return Err(format!("queue: {e}")),
        };
        for m in q.browse() {
            let m = m.map_err(|e| format!("browse: {e}"))?;
            present.insert(m.id().get(), String::from_utf8_lossy(m.body()).into_owned());
        }
        let s = q.stats().map_err(|e| e.to_string())?;
        if s.active + s.locked + s.scheduled + s.dead_lettered != present.len() as u64 {
            return Err(format!("counts {s:?} for {} messages", present.len()));
        }
        drop(q);
        store.close().map_err(|e| format!("close: {e}"))?;
        self.judge(&present)?;
        Ok(present)
    }

    fn judge(&self, present: &BTreeMap<u64, String>) -> Result<(), String> {
        let mut sent = BTreeMap::new();
        let mut completed = BTreeSet::new();
        let mut taking = None;
        for a in &self.acked {
            match a {
                Ack::Sent(id, body) => {
                    sent.insert(*id, body.clone());
                }
                Ack::Batch(tag, ids) => {
                    for (k, id) in ids.iter().enumerate() {
                        sent.insert(*id, format!("{tag}.{k}"));
                    }
                }
                Ack::Taking(id) => taking = Some(*id),
                Ack::Completed(id) => {
                    completed.insert(*id);
                    taking = None;
                }
            }
        }
        for (id, body) in &sent {
            match present.get(id) {
                Some(_) if completed.contains(id) => {
                    return Err(format!("completed message {id} is back"));
                }
                Some(found) if found != body => {
                    return Err(format!("message {id} reads {found:?}, not {body:?}"));
                }
                None if !completed.contains(id) && taking != Some(*id) => {
                    return Err(format!("acknowledged message {id} ({body}) is lost"));
                }
                _ => {}
            }
        }
        // A batch in flight (not acknowledged, so none of it was received yet): all or
        // nothing. Acknowledged ones were checked message by message above.
        let acked_batches: BTreeSet<&str> = self
            .acked
            .iter()
            .filter_map(|a| match a {
                Ack::Batch(tag, _) => Some(tag.as_str()),
                _ => None,
            })
            .collect();
        let mut by_tag: BTreeMap<&str, usize> = BTreeMap::new();
        for body in present.values() {
            if let Some((tag, _)) = body.split_once('.')
                && !acked_batches.contains(tag)
            {
                *by_tag.entry(tag).or_default() += 1;
            }
        }
        if let Some((tag, n)) = by_tag.iter().find(|(_, n)| **n != 3) {
            return Err(format!("batch {tag} is {n} of 3 messages"));
        }
        // A transaction's follow-up and the message it consumed are never both there.
        for body in present.values() {
            if let Some(of) = body.strip_prefix("follow-up-of-")
                && present.contains_key(&of.parse::<u64>().unwrap_or(0))
            {
                return Err(format!("{body} is there beside the message it consumed"));
            }
        }
        Ok(())
    }
}

/// The recording tap: every write is noted, every sync is a possible power loss.
#[derive(Debug)]
struct Recorder(Shared);

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sim({} images)", self.images)
    }
}

fn index(which: Which) -> usize {
    match which {
        Which::Store => STORE,
        Which::Log => LOG,
    }
}

impl Tap for Recorder {
    fn opened(&self, which: Which, file: &File) -> io::Result<()> {
        self.0.lock().track(index(which), file)
    }

    fn before(&self, which: Which, io: &Io<'_>) -> io::Result<()> {
        if let Io::Sync = io {
            let mut sim = self.0.lock();
            if which == Which::Log && std::mem::take(&mut sim.fail_next_log_sync) {
                // EIO, what a failing disk gives fsync.
                return Err(io::Error::from_raw_os_error(5));
            }
            sim.power_loss_now(index(which));
        }
        Ok(())
    }

    fn after(&self, which: Which, io: &Io<'_>) {
        let op = match io {
            Io::Write(at, data) => Op::Write(*at, data.to_vec()),
            Io::SetLen(len) => Op::SetLen(*len),
            Io::Sync => {
                if let Some(f) = &mut self.0.lock().files[index(which)] {
                    f.synced();
                }
                return;
            }
            Io::Read => return,
        };
        self.0.lock().record(index(which), op);
    }
}

/// A power loss while a store is being created: the directory holds the half-built temporary
/// file of a process that is gone and no store. Opening creates an empty store that works, and
/// removes the temporary file.
fn check_creation_image(dir: &Path, image: &[u8]) -> Result<(), String> {
    // No process has the largest pid: the kernel hands out pids below it.
    let dead_pid = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(u64::from(u32::MAX));
    let temp = dir.join(format!(".s.postbox.creating-{dead_pid}-12345"));
    std::fs::write(&temp, image).map_err(|e| e.to_string())?;
    let path = dir.join("s.postbox");
    let store = Store::open(&path).map_err(|e| format!("creating anew: {e}"))?;
    let q = store.queue("q").map_err(|e| e.to_string())?;
    if q.len().map_err(|e| e.to_string())? != 0 {
        return Err("a new store holds messages".into());
    }
    let id = q.send("first").map_err(|e| e.to_string())?;
    let m = q.try_receive().map_err(|e| e.to_string())?;
    if m.as_ref().map(|m| m.id()) != Some(id) {
        return Err("a new store lost its first message".into());
    }
    drop((m, q));
    store.close().map_err(|e| format!("close: {e}"))?;
    if temp.exists() {
        return Err("the interrupted creation's temporary file is still there".into());
    }
    std::fs::remove_dir_all(dir).map_err(|e| e.to_string())?;
    Ok(())
}

/// Runs the workload through the recording layer; returns (images checked, records replayed).
fn run(ops: u64, checkpoint_bytes: Option<u64>, rng: &mut Rng, variants: u64) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let sim = Sim::new(rng, variants);
    sim.lock().creation = Creation::Expected;
    let mut b = Store::builder().storage_layer(layer::layer(Arc::new(Recorder(sim.clone()))));
    if let Some(bytes) = checkpoint_bytes {
        b = b.log_checkpoints(bytes, Duration::from_secs(1));
    }
    let store = b.open(&path).unwrap();
    let q = store.queue("q").unwrap();
    let ack = |a: Ack| sim.lock().acked.push(a);
    let mut n = 0;
    for i in 0..ops {
        match rng.below(6) {
            0 | 1 => {
                let body = format!("m{i}-{}", "x".repeat(rng.below(3000) as usize));
                let id = q.send(Message::new(body.clone())).unwrap();
                ack(Ack::Sent(id.get(), body));
            }
            2 => {
                let tag = format!("b{i}");
                let ids = q
                    .send_batch((0..3).map(|k| Message::new(format!("{tag}.{k}"))))
                    .unwrap();
                ack(Ack::Batch(tag, ids.iter().map(|id| id.get()).collect()));
            }
            3 | 4 => {
                if let Some(m) = q.try_receive().unwrap() {
                    let id = m.id().get();
                    ack(Ack::Taking(id));
                    m.complete().unwrap();
                    ack(Ack::Completed(id));
                }
            }
            _ => {
                let mut tx = store.begin();
                if let Some(m) = tx.receive(&q, Duration::ZERO).unwrap() {
                    let id = m.id().get();
                    ack(Ack::Taking(id));
                    let body = format!("follow-up-of-{id}");
                    let sent = tx.send(&q, Message::new(body.clone())).unwrap();
                    tx.commit().unwrap();
                    ack(Ack::Completed(id));
                    ack(Ack::Sent(sent.get(), body));
                } else {
                    tx.abort().unwrap();
                }
            }
        }
        n += 1;
    }
    drop(q);
    store.close().unwrap();
    let sim = sim.lock();
    sim.assert_no_failures(&format!("after {n} operations"));
    assert_eq!(sim.creation, Creation::Done, "the creation was not seen");
    assert!(sim.creation_images > 0, "no image inside the creation");
    println!(
        "{} of the images inside the store's creation",
        sim.creation_images
    );
    (sim.images, sim.replayed)
}

#[test]
fn every_power_loss_image_recovers_what_was_acknowledged() {
    let ops = env_u64("POSTBOX_POWERLOSS_OPS", 60 * stress());
    let variants = env_u64("POSTBOX_POWERLOSS_VARIANTS", 4).clamp(1, 4);
    // Many short runs rather than one long one: an image costs what its store weighs, so a
    // long tier of fresh small stores checks far more images per minute.
    let runs = env_u64("POSTBOX_POWERLOSS_RUNS", 1).max(1);
    let mut rng = Rng::from_env("power_loss");
    let (mut images, mut replayed) = (0, 0);
    for _ in 0..runs {
        let (a, ra) = run(ops, None, &mut rng, variants);
        let (b, rb) = run(ops, Some(16 << 10), &mut rng, variants);
        images += a + b;
        replayed += ra + rb;
    }
    println!("{images} crash images checked in {runs} runs, {replayed} log records replayed");
    assert!(replayed > 0, "no image needed the log");
}

/// Power loss while an older store is opened and upgraded (its format version rewritten, the
/// first log cycle started) and closed: every image holds the fixture's messages, exactly.
#[test]
fn power_loss_during_a_format_upgrade_keeps_every_message() {
    let variants = env_u64("POSTBOX_POWERLOSS_VARIANTS", 4).clamp(1, 4);
    let mut rng = Rng::from_env("power_loss_upgrade");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut images = 0;
    for version in 1..=4 {
        let fixture = fixtures.join(format!("v{version}.postbox"));
        let dir = tempfile::tempdir().unwrap();
        // What clean opens read: the references every image must match. A third open reads
        // as the second: the maintenance of one open leaves nothing for the next.
        let clean = dir.path().join("clean.postbox");
        std::fs::copy(&fixture, &clean).unwrap();
        let untouched = contents(&clean).unwrap();
        let opened = contents(&clean).unwrap();
        assert_eq!(
            contents(&clean).unwrap(),
            opened,
            "v{version}: opens disagree"
        );
        assert!(
            opened.values().any(|m| !m.is_empty()),
            "v{version}: an empty fixture"
        );
        let expect = (untouched, opened);

        let path = dir.path().join("s.postbox");
        std::fs::copy(&fixture, &path).unwrap();
        let sim = Sim::new(&mut rng, variants);
        sim.lock().expect = Some(expect);
        let store = Store::builder()
            .storage_layer(layer::layer(Arc::new(Recorder(sim.clone()))))
            .open(&path)
            .unwrap();
        store.close().unwrap();
        let sim = sim.lock();
        sim.assert_no_failures(&format!("v{version}"));
        images += sim.images;
    }
    println!("{images} crash images of format upgrades checked");
    assert!(images > 0);
}

#[test]
fn a_failed_log_sync_reports_outcome_unknown_and_the_store_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let mut rng = Rng::new(7);
    let sim = Sim::new(&mut rng, 0);
    let store = Store::builder()
        .storage_layer(layer::layer(Arc::new(Recorder(sim.clone()))))
        .open(&path)
        .unwrap();
    let q = store.queue("q").unwrap();
    let before = q.send(Message::new("before")).unwrap();
    sim.lock().fail_next_log_sync = true;
    let err = q.send(Message::new("maybe")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    // The store reopens its files and goes on; what it holds is what a reopen finds.
    let after = q.send(Message::new("after")).unwrap();
    let bodies: Vec<Vec<u8>> = q.browse().map(|m| m.unwrap().body().to_vec()).collect();
    assert!(bodies.contains(&b"before".to_vec()) && bodies.contains(&b"after".to_vec()));
    drop(q);
    store.close().unwrap();
    let again = Store::open(&path).unwrap();
    let q = again.queue("q").unwrap();
    let ids: Vec<u64> = q.browse().map(|m| m.unwrap().id().get()).collect();
    assert!(ids.contains(&before.get()) && ids.contains(&after.get()));
    let reread: Vec<Vec<u8>> = q.browse().map(|m| m.unwrap().body().to_vec()).collect();
    assert_eq!(reread, bodies);
}
