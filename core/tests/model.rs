//! Model test: random sequences of operations run against a real store and against a plain
//! in-memory model of the queue semantics; after every step the exact counts, the delivery order
//! and the delivery counts of the store must equal the model's.
//!
//! `POSTBOX_PROPTEST_CASES` sets the number of cases (default 64).

mod common;
#[path = "common/layer.rs"]
mod layer;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use postbox::{Durability, ManualClock, Message, MessageId, Queue, QueueOptions, Received, Store};
use proptest::prelude::*;

const LOCK: Duration = Duration::from_secs(10);
const DELAY: Duration = Duration::from_secs(5);
/// Queue 0 dead-letters on the third delivery; queue 1 keeps the default of 10. Queues 2 and 3
/// are their dead-letter queues.
const MAX_DELIVERIES: [u32; 4] = [3, 10, u32::MAX, u32::MAX];

#[derive(Debug, Clone)]
enum Op {
    Send {
        q: usize,
        priority: u8,
        len: usize,
    },
    SendBatch {
        q: usize,
        priorities: Vec<u8>,
    },
    Receive {
        q: usize,
    },
    Complete(usize),
    Abandon(usize),
    /// Abandons with a delay of `DELAY`: the message is scheduled.
    AbandonAfter(usize),
    /// Dead-letters a message of a normal queue, resubmits one of a dead-letter queue.
    DeadLetter(usize),
    /// Drops the handle unsettled (an implicit abandon).
    Drop(usize),
    Tx {
        from: usize,
        n_recv: usize,
        to: usize,
        n_send: usize,
        priority: u8,
        end: TxEnd,
    },
    /// Moves the clock past every lock and every delay.
    ExpireLocks,
    /// Closes the store (releasing every lock) and opens it again.
    Reopen,
    /// With the write-ahead log: opens a copy of what the store's files hold at this moment —
    /// what a process killed now leaves — so the copy replays the log's records (its logical
    /// records: sends, settles), and goes on with the copy. Without, as `Reopen`.
    Crash,
}

#[derive(Debug, Clone, Copy)]
enum TxEnd {
    Commit,
    Abort,
    Drop,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..2usize, 0..8u8, 0..40usize).prop_map(|(q, priority, len)| Op::Send { q, priority, len }),
        1 => (0..2usize, prop::collection::vec(0..8u8, 0..5))
            .prop_map(|(q, priorities)| Op::SendBatch { q, priorities }),
        6 => (0..4usize).prop_map(|q| Op::Receive { q }),
        3 => any::<usize>().prop_map(Op::Complete),
        2 => any::<usize>().prop_map(Op::Abandon),
        1 => any::<usize>().prop_map(Op::AbandonAfter),
        1 => any::<usize>().prop_map(Op::DeadLetter),
        1 => any::<usize>().prop_map(Op::Drop),
        3 => (0..4usize, 0..3usize, 0..2usize, 0..3usize, 0..8u8, prop_oneof![
                Just(TxEnd::Commit), Just(TxEnd::Abort), Just(TxEnd::Drop)])
            .prop_map(|(from, n_recv, to, n_send, priority, end)| Op::Tx {
                from, n_recv, to, n_send, priority, end,
            }),
        1 => Just(Op::ExpireLocks),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

#[derive(Debug, Clone)]
struct MMsg {
    queue: usize,
    priority: u8,
    dc: u32,
    len: u64,
    locked: bool,
    /// Scheduled (abandoned with a delay) until this model time, in ms.
    due: Option<u64>,
}

#[derive(Debug, Default)]
struct Model {
    msgs: BTreeMap<u64, MMsg>,
    last_id: u64,
    /// Milliseconds the clock has been advanced.
    now: u64,
}

impl Model {
    fn ready(&self, q: usize) -> Vec<u64> {
        let mut v: Vec<(std::cmp::Reverse<u8>, u64)> = self
            .msgs
            .iter()
            .filter(|(_, m)| m.queue == q && !m.locked && m.due.is_none())
            .map(|(id, m)| (std::cmp::Reverse(m.priority), *id))
            .collect();
        v.sort();
        v.into_iter().map(|(_, id)| id).collect()
    }

    fn add(&mut self, id: u64, q: usize, priority: u8, len: usize) {
        assert!(id > self.last_id, "id {id} not above {}", self.last_id);
        self.last_id = id;
        self.msgs.insert(
            id,
            MMsg {
                queue: q,
                priority,
                dc: 0,
                len: len as u64,
                locked: false,
                due: None,
            },
        );
    }

    /// The message a receive on `q` must lock, with its new delivery count.
    fn receive(&mut self, q: usize) -> Option<(u64, u32)> {
        loop {
            let id = *self.ready(q).first()?;
            let m = self.msgs.get_mut(&id).unwrap();
            if m.dc >= MAX_DELIVERIES[q] {
                m.queue = q + 2;
                continue;
            }
            m.dc += 1;
            m.locked = true;
            return Some((id, m.dc));
        }
    }

    fn requeue(&mut self, id: u64) {
        let m = self.msgs.get_mut(&id).unwrap();
        assert!(m.locked);
        m.locked = false;
        if m.dc >= MAX_DELIVERIES[m.queue] {
            m.queue += 2;
        }
    }

    fn abandon_after(&mut self, id: u64) {
        let now = self.now;
        let m = self.msgs.get_mut(&id).unwrap();
        assert!(m.locked);
        if m.dc >= MAX_DELIVERIES[m.queue] {
            return self.requeue(id);
        }
        m.locked = false;
        m.due = Some(now + DELAY.as_millis() as u64);
    }

    /// Time passes: locks expire, delays end.
    fn advance(&mut self, by: Duration) {
        self.now += by.as_millis() as u64;
        for id in self.locked_ids() {
            self.requeue(id);
        }
        let now = self.now;
        for m in self.msgs.values_mut() {
            if m.due.is_some_and(|d| d <= now) {
                m.due = None;
                if m.dc >= MAX_DELIVERIES[m.queue] {
                    m.queue += 2;
                }
            }
        }
    }

    fn complete(&mut self, id: u64) {
        assert!(self.msgs.remove(&id).unwrap().locked);
    }

    fn dead_letter_or_resubmit(&mut self, id: u64) {
        let m = self.msgs.get_mut(&id).unwrap();
        m.locked = false;
        if m.queue < 2 {
            m.queue += 2;
        } else {
            m.queue -= 2;
            m.dc = 0;
        }
    }

    fn locked_ids(&self) -> Vec<u64> {
        self.msgs
            .iter()
            .filter(|(_, m)| m.locked)
            .map(|(id, _)| *id)
            .collect()
    }
}

struct Held {
    r: Received,
    id: u64,
    /// The lock expired (or was released): settling must fail with `LockLost`.
    lost: bool,
}

struct Harness {
    path: std::path::PathBuf,
    /// Set when the store runs with the write-ahead log (and `shadow` copies its files).
    shadow: Option<Arc<Shadow>>,
    crashes: u64,
    /// Log records the crash copies replayed when they were opened.
    replayed: u64,
    clock: Arc<ManualClock>,
    store: Option<Store>,
    queues: Vec<Queue>,
    held: Vec<Held>,
    model: Model,
    counter: u64,
}

/// What a store's two files hold, write by write: a process killed at any moment leaves its
/// writes in the page cache, so a copy of this is what the next open finds.
#[derive(Debug, Default)]
struct Shadow {
    files: std::sync::Mutex<[Vec<u8>; 2]>,
}

impl Shadow {
    fn slot(which: layer::Which) -> usize {
        match which {
            layer::Which::Store => 0,
            layer::Which::Log => 1,
        }
    }

    /// Writes the copy: the store file at `path`, and the log beside it when there is one.
    fn write_copy(&self, path: &Path) {
        let files = self.files.lock().unwrap();
        std::fs::write(path, &files[0]).unwrap();
        if !files[1].is_empty() {
            let mut log = path.as_os_str().to_owned();
            log.push("-log");
            std::fs::write(log, &files[1]).unwrap();
        }
    }
}

impl layer::Tap for Shadow {
    fn opened(&self, which: layer::Which, file: &std::fs::File) -> std::io::Result<()> {
        use std::io::{Read, Seek};
        let mut f = file.try_clone()?;
        let mut bytes = Vec::new();
        f.seek(std::io::SeekFrom::Start(0))?;
        f.read_to_end(&mut bytes)?;
        self.files.lock().unwrap()[Self::slot(which)] = bytes;
        Ok(())
    }

    fn after(&self, which: layer::Which, io: &layer::Io<'_>) {
        let mut files = self.files.lock().unwrap();
        let f = &mut files[Self::slot(which)];
        match io {
            layer::Io::Write(at, data) => {
                let (at, end) = (*at as usize, *at as usize + data.len());
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[at..end].copy_from_slice(data);
            }
            layer::Io::SetLen(n) => f.resize(*n as usize, 0),
            layer::Io::Read | layer::Io::Sync => {}
        }
    }
}

fn open(
    path: &Path,
    clock: &Arc<ManualClock>,
    shadow: Option<&Arc<Shadow>>,
) -> (Store, Vec<Queue>) {
    let b = Store::builder().clock(clock.clone());
    let b = match shadow {
        Some(s) => b.storage_layer(layer::layer(s.clone())),
        None => b.durability(Durability::None),
    };
    let store = b.open(path).unwrap();
    let opts = QueueOptions::default().lock_duration(LOCK);
    let q0 = store
        .queue_with("q0", opts.clone().max_deliveries(MAX_DELIVERIES[0]))
        .unwrap();
    let q1 = store.queue_with("q1", opts).unwrap();
    let d0 = q0.dead_letters().unwrap();
    let d1 = q1.dead_letters().unwrap();
    (store, vec![q0, q1, d0, d1])
}

impl Harness {
    fn body(&mut self, len: usize) -> Vec<u8> {
        self.counter += 1;
        let mut b = format!("{:08}", self.counter).into_bytes();
        b.resize(len.max(8), b'.');
        b
    }

    fn pick(&self, i: usize) -> Option<usize> {
        (!self.held.is_empty()).then(|| i % self.held.len())
    }

    fn settle(&mut self, i: usize, how: &str) {
        let Some(i) = self.pick(i) else { return };
        let h = self.held.remove(i);
        let result = match how {
            "complete" => h.r.complete(),
            "abandon" => h.r.abandon(),
            "abandon_after" => h.r.abandon_after(DELAY),
            // A message received from a dead-letter queue is resubmitted instead.
            _ if h.r.queue().ends_with("/$deadletterqueue") => h.r.resubmit(),
            _ => h.r.dead_letter("ModelReason", "model description"),
        };
        if h.lost {
            let e = result.expect_err("settling a lost lock must fail");
            assert!(e.is_lock_lost(), "{how}: {e}");
            return;
        }
        result.unwrap_or_else(|e| panic!("{how} {}: {e}", h.id));
        match how {
            "complete" => self.model.complete(h.id),
            "abandon" => self.model.requeue(h.id),
            "abandon_after" => self.model.abandon_after(h.id),
            _ => self.model.dead_letter_or_resubmit(h.id),
        }
    }

    fn step(&mut self, op: &Op) {
        match op {
            Op::Send { q, priority, len } => {
                let body = self.body(*len);
                let n = body.len();
                let id = self.queues[*q]
                    .send(Message::new(body).priority(*priority))
                    .unwrap();
                self.model.add(id.get(), *q, *priority, n);
            }
            Op::SendBatch { q, priorities } => {
                let msgs: Vec<Message> = priorities
                    .iter()
                    .map(|p| Message::new(self.body(10)).priority(*p))
                    .collect();
                let ids = self.queues[*q].send_batch(msgs).unwrap();
                assert_eq!(ids.len(), priorities.len());
                for (id, p) in ids.into_iter().zip(priorities) {
                    self.model.add(id.get(), *q, *p, 10);
                }
            }
            Op::Receive { q } => {
                let got = self.queues[*q].try_receive().unwrap();
                let want = self.model.receive(*q);
                match (got, want) {
                    (None, None) => {}
                    (Some(r), Some((id, dc))) => {
                        assert_eq!((r.id().get(), r.delivery_count()), (id, dc), "receive q{q}");
                        self.held.push(Held { r, id, lost: false });
                    }
                    (got, want) => panic!(
                        "receive q{q}: store gave {:?}, model expected {want:?}",
                        got.map(|r| r.id())
                    ),
                }
            }
            Op::Complete(i) => self.settle(*i, "complete"),
            Op::Abandon(i) => self.settle(*i, "abandon"),
            Op::AbandonAfter(i) => self.settle(*i, "abandon_after"),
            Op::DeadLetter(i) => self.settle(*i, "dead_letter"),
            Op::Drop(i) => {
                if let Some(i) = self.pick(*i) {
                    let h = self.held.remove(i);
                    if !h.lost {
                        self.model.requeue(h.id);
                    }
                    drop(h.r);
                }
            }
            Op::Tx {
                from,
                n_recv,
                to,
                n_send,
                priority,
                end,
            } => self.tx(*from, *n_recv, *to, *n_send, *priority, *end),
            Op::ExpireLocks => {
                self.clock.advance(LOCK);
                self.model.advance(LOCK);
                for h in &mut self.held {
                    h.lost = true;
                }
            }
            Op::Reopen => {
                self.queues.clear();
                self.store.take().unwrap().close().unwrap();
                for id in self.model.locked_ids() {
                    self.model.requeue(id);
                }
                // The handles outlived their store: dropping them must not disturb anything.
                self.held.clear();
                let (store, queues) = open(&self.path, &self.clock, self.shadow.as_ref());
                self.store = Some(store);
                self.queues = queues;
            }
            Op::Crash => {
                let Some(old) = self.shadow.take() else {
                    return self.step(&Op::Reopen);
                };
                self.crashes += 1;
                let copy = self
                    .path
                    .with_file_name(format!("crash-{}.postbox", self.crashes));
                old.write_copy(&copy);
                // The old store goes on with its own files; only the copy matters now.
                self.queues.clear();
                self.held.clear();
                self.store.take().unwrap().close().unwrap();
                for id in self.model.locked_ids() {
                    self.model.requeue(id);
                }
                let shadow = Arc::new(Shadow::default());
                let (store, queues) = open(&copy, &self.clock, Some(&shadow));
                self.replayed += store.stats().replayed_records;
                self.path = copy;
                self.shadow = Some(shadow);
                self.store = Some(store);
                self.queues = queues;
            }
        }
    }

    fn tx(&mut self, from: usize, n_recv: usize, to: usize, n_send: usize, p: u8, end: TxEnd) {
        let store = self.store.clone().unwrap();
        let mut tx = store.begin();
        let mut received = Vec::new();
        for _ in 0..n_recv {
            let got = tx.try_receive(&self.queues[from]).unwrap();
            let want = self.model.receive(from);
            match (got, want) {
                (None, None) => break,
                (Some(e), Some((id, dc))) => {
                    assert_eq!((e.id().get(), e.delivery_count()), (id, dc), "tx receive");
                    received.push(id);
                }
                (got, want) => panic!(
                    "tx receive q{from}: store gave {:?}, model expected {want:?}",
                    got.map(|e| e.id())
                ),
            }
        }
        let mut bodies = Vec::new();
        for _ in 0..n_send {
            let body = self.body(12);
            tx.send(&self.queues[to], Message::new(body.clone()).priority(p))
                .unwrap();
            bodies.push(body);
        }
        // Sends are invisible until commit.
        let before: Vec<u64> = self.queues[to]
            .browse()
            .map(|e| e.unwrap().id().get())
            .collect();
        assert_eq!(before, self.model.ready(to), "tx sends must be invisible");
        match end {
            TxEnd::Commit => {
                tx.commit().unwrap();
                for id in received {
                    self.model.complete(id);
                }
                // Find the ids the commit gave the sends: browse in id order.
                let mut new: Vec<(MessageId, Vec<u8>)> = self.queues[to]
                    .browse()
                    .map(Result::unwrap)
                    .filter(|e| !self.model.msgs.contains_key(&e.id().get()))
                    .map(|e| (e.id(), e.into_body()))
                    .collect();
                new.sort();
                let got_bodies: Vec<Vec<u8>> = new.iter().map(|(_, b)| b.clone()).collect();
                assert_eq!(got_bodies, bodies, "tx sends stored in order");
                for (id, body) in new {
                    self.model.add(id.get(), to, p, body.len());
                }
            }
            TxEnd::Abort | TxEnd::Drop => {
                if matches!(end, TxEnd::Abort) {
                    tx.abort().unwrap();
                } else {
                    drop(tx);
                }
                for id in received {
                    self.model.requeue(id);
                }
            }
        }
    }

    fn check(&self, step: usize, op: &Op) {
        for (q, queue) in self.queues.iter().enumerate() {
            let in_q = |f: &dyn Fn(&MMsg) -> bool| {
                self.model
                    .msgs
                    .values()
                    .filter(|m| m.queue == q && f(m))
                    .count() as u64
            };
            let s = queue.stats().unwrap();
            let expected = (
                in_q(&|m| !m.locked && m.due.is_none()),
                in_q(&|m| m.locked),
                in_q(&|m| m.due.is_some()),
                if q < 2 {
                    self.model
                        .msgs
                        .values()
                        .filter(|m| m.queue == q + 2)
                        .count() as u64
                } else {
                    0
                },
                self.model
                    .msgs
                    .values()
                    .filter(|m| m.queue == q)
                    .map(|m| m.len)
                    .sum::<u64>(),
            );
            assert_eq!(
                (s.active, s.locked, s.scheduled, s.dead_lettered, s.bytes),
                expected,
                "counts of queue {q} after step {step} ({op:?})"
            );
            let browsed: Vec<(u64, u32)> = queue
                .browse()
                .map(|e| {
                    let e = e.unwrap();
                    (e.id().get(), e.delivery_count())
                })
                .collect();
            let modelled: Vec<(u64, u32)> = self
                .model
                .ready(q)
                .into_iter()
                .map(|id| (id, self.model.msgs[&id].dc))
                .collect();
            assert_eq!(
                browsed, modelled,
                "order and delivery counts of queue {q} after step {step} ({op:?})"
            );
        }
    }
}

fn run(ops: &[Op]) {
    run_with(ops, false);
}

/// Runs `ops` against the model, with the write-ahead log when `logged` (every operation
/// durable, `Crash` opening a copy of the files that replays the log).
fn run_with(ops: &[Op], logged: bool) -> u64 {
    let dir = if logged {
        tempfile::tempdir().unwrap()
    } else {
        common::fast_tempdir()
    };
    let path = dir.path().join("model.postbox");
    let clock = ManualClock::new();
    let shadow = logged.then(|| Arc::new(Shadow::default()));
    let (store, queues) = open(&path, &clock, shadow.as_ref());
    let mut h = Harness {
        path,
        shadow,
        crashes: 0,
        replayed: 0,
        clock,
        store: Some(store),
        queues,
        held: Vec::new(),
        model: Model::default(),
        counter: 0,
    };
    for (step, op) in ops.iter().enumerate() {
        h.step(op);
        h.check(step, op);
    }
    // Drain everything: what the model holds is exactly what the store delivers.
    h.held.clear();
    for id in h.model.locked_ids() {
        h.model.requeue(id);
    }
    // Let every delay run out.
    h.step(&Op::ExpireLocks);
    for q in 0..4 {
        for id in h.model.locked_ids() {
            h.model.requeue(id);
        }
        while let Some(r) = h.queues[q].try_receive().unwrap() {
            let (id, dc) = h.model.receive(q).expect("model has it too");
            assert_eq!((r.id().get(), r.delivery_count()), (id, dc));
            r.complete().unwrap();
            h.model.complete(id);
        }
        assert!(h.model.receive(q).is_none());
    }
    h.check(ops.len(), &Op::Reopen);
    h.replayed
}

fn cases() -> u32 {
    common::knob("POSTBOX_PROPTEST_CASES", 64) as u32
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn store_matches_model(ops in prop::collection::vec(op(), 1..50)) {
        run(&ops);
    }

    /// The same with the write-ahead log, where `Crash` replays random logs of logical
    /// records (and the rows of transactions and of the batches that drew ids).
    #[test]
    fn store_matches_model_through_log_replay(ops in prop::collection::vec(op(), 1..50)) {
        run_with(&ops, true);
    }
}

#[test]
fn model_smoke_sequence() {
    // A fixed sequence touching every operation, so a regression shows up without shrinking.
    use Op::*;
    run(&[
        Send {
            q: 0,
            priority: 3,
            len: 5,
        },
        Send {
            q: 0,
            priority: 7,
            len: 9,
        },
        SendBatch {
            q: 1,
            priorities: vec![0, 7, 3],
        },
        Receive { q: 0 },
        Abandon(0),
        Receive { q: 0 },
        Receive { q: 0 },
        DeadLetter(0),
        Receive { q: 2 },
        DeadLetter(0),
        Tx {
            from: 1,
            n_recv: 2,
            to: 0,
            n_send: 2,
            priority: 5,
            end: TxEnd::Commit,
        },
        Tx {
            from: 0,
            n_recv: 2,
            to: 1,
            n_send: 1,
            priority: 1,
            end: TxEnd::Abort,
        },
        Tx {
            from: 0,
            n_recv: 1,
            to: 1,
            n_send: 1,
            priority: 1,
            end: TxEnd::Drop,
        },
        Receive { q: 1 },
        ExpireLocks,
        Complete(0),
        Receive { q: 0 },
        Reopen,
        Receive { q: 0 },
        Drop(0),
        Receive { q: 0 },
        Abandon(0),
        Receive { q: 0 },
        Abandon(0),
        Send {
            q: 1,
            priority: 4,
            len: 3,
        },
        Receive { q: 1 },
        AbandonAfter(0),
        Receive { q: 1 },
        Reopen,
        ExpireLocks,
        Receive { q: 1 },
        AbandonAfter(0),
    ]);
}

#[test]
fn model_smoke_sequence_through_log_replay() {
    // Sends, settles (a resubmit among them, which draws a new id), transactions and a
    // crash with messages held, then crashes again right after a crash's replay.
    use Op::*;
    let replayed = run_with(
        &[
            Send {
                q: 0,
                priority: 3,
                len: 10,
            },
            SendBatch {
                q: 0,
                priorities: vec![1, 7, 4],
            },
            Receive { q: 0 },
            Receive { q: 0 },
            Complete(0),
            Crash,
            Receive { q: 0 },
            DeadLetter(0),
            Receive { q: 2 },
            DeadLetter(0),
            Receive { q: 0 },
            AbandonAfter(0),
            Tx {
                from: 0,
                n_recv: 1,
                to: 1,
                n_send: 2,
                priority: 5,
                end: TxEnd::Commit,
            },
            Crash,
            Crash,
            Receive { q: 1 },
            Abandon(0),
            ExpireLocks,
            Receive { q: 0 },
            Crash,
        ],
        true,
    );
    assert!(replayed > 0, "no crash replayed anything");
}
