//! Target `queue_model`: arbitrary sequences of queue operations run against a real store (in a
//! temporary directory, with the write-ahead log) and against a plain model of the queue
//! semantics; after every step the exact counts, the delivery order, delivery counts and bodies
//! must agree. The model follows `core/tests/model.rs` and adds peek, defer, receive by id and
//! purge.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use postbox::{ManualClock, Message, MessageId, Queue, QueueOptions, Received, Store};

const MAX_OPS: usize = 48;
const LOCK: Duration = Duration::from_secs(10);
const DELAY: Duration = Duration::from_secs(5);
/// Queue 0 dead-letters on the third delivery; queue 1 keeps the default of 10. Queues 2 and 3
/// are their dead-letter queues.
const MAX_DELIVERIES: [u32; 4] = [3, 10, u32::MAX, u32::MAX];

#[derive(Debug, Arbitrary)]
enum Op {
    Send {
        q: u8,
        priority: u8,
        len: u8,
    },
    SendBatch {
        q: u8,
        priorities: [u8; 3],
        n: u8,
    },
    Receive {
        q: u8,
    },
    ReceiveById {
        q: u8,
        pick: u8,
    },
    Peek {
        q: u8,
    },
    Complete(u8),
    Abandon(u8),
    AbandonAfter(u8),
    /// Dead-letters a message of a normal queue, resubmits one of a dead-letter queue.
    DeadLetter(u8),
    Defer(u8),
    /// Drops the handle unsettled (an implicit abandon).
    Drop(u8),
    Tx {
        from: u8,
        n_recv: u8,
        to: u8,
        n_send: u8,
        priority: u8,
        end: TxEnd,
    },
    Purge {
        q: u8,
    },
    /// Moves the clock past every lock and every delay.
    ExpireLocks,
    /// Closes the store (releasing every lock) and opens it again.
    Reopen,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum TxEnd {
    Commit,
    Abort,
    Drop,
}

#[derive(Debug, Clone)]
struct MMsg {
    queue: usize,
    priority: u8,
    dc: u32,
    body: Vec<u8>,
    locked: bool,
    deferred: bool,
    /// Scheduled (abandoned with a delay) until this model time, in ms.
    due: Option<u64>,
}

impl MMsg {
    fn ready(&self) -> bool {
        !self.locked && !self.deferred && self.due.is_none()
    }
}

#[derive(Debug, Default)]
struct Model {
    msgs: BTreeMap<u64, MMsg>,
    last_id: u64,
    now: u64,
}

impl Model {
    fn ready(&self, q: usize) -> Vec<u64> {
        let mut v: Vec<(std::cmp::Reverse<u8>, u64)> = self
            .msgs
            .iter()
            .filter(|(_, m)| m.queue == q && m.ready())
            .map(|(id, m)| (std::cmp::Reverse(m.priority), *id))
            .collect();
        v.sort();
        v.into_iter().map(|(_, id)| id).collect()
    }

    fn add(&mut self, id: u64, q: usize, priority: u8, body: Vec<u8>) {
        assert!(id > self.last_id, "id {id} not above {}", self.last_id);
        self.last_id = id;
        let m = MMsg {
            queue: q,
            priority,
            dc: 0,
            body,
            locked: false,
            deferred: false,
            due: None,
        };
        self.msgs.insert(id, m);
    }

    fn msg(&mut self, id: u64) -> &mut MMsg {
        self.msgs.get_mut(&id).expect("the model holds the message")
    }

    /// The message a receive on `q` must lock, with its new delivery count.
    fn receive(&mut self, q: usize) -> Option<(u64, u32)> {
        loop {
            let id = *self.ready(q).first()?;
            if let Some(got) = self.lock(q, id) {
                return Some(got);
            }
        }
    }

    /// Locks `id` for a receive, or moves it to the dead-letter queue when it is spent.
    fn lock(&mut self, q: usize, id: u64) -> Option<(u64, u32)> {
        let m = self.msg(id);
        if m.dc >= MAX_DELIVERIES[q] {
            m.queue = q + 2;
            m.deferred = false;
            return None;
        }
        m.dc += 1;
        m.locked = true;
        Some((id, m.dc))
    }

    fn requeue(&mut self, id: u64) {
        let m = self.msg(id);
        assert!(m.locked);
        m.locked = false;
        if m.dc >= MAX_DELIVERIES[m.queue] {
            m.queue += 2;
            m.deferred = false;
        }
    }

    fn abandon_after(&mut self, id: u64) {
        let now = self.now;
        let m = self.msg(id);
        assert!(m.locked);
        if m.dc >= MAX_DELIVERIES[m.queue] || m.deferred {
            return self.requeue(id);
        }
        m.locked = false;
        m.due = Some(now + DELAY.as_millis() as u64);
    }

    fn defer(&mut self, id: u64) {
        let m = self.msg(id);
        assert!(m.locked);
        m.locked = false;
        m.deferred = true;
    }

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
        let m = self.msgs.remove(&id).expect("the model holds the message");
        assert!(m.locked);
    }

    fn dead_letter_or_resubmit(&mut self, id: u64) {
        let m = self.msg(id);
        m.locked = false;
        m.deferred = false;
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
    /// The lock expired or the message was purged: settling must fail with `LockLost`.
    lost: bool,
}

struct Harness {
    path: std::path::PathBuf,
    clock: Arc<ManualClock>,
    store: Option<Store>,
    queues: Vec<Queue>,
    held: Vec<Held>,
    model: Model,
    counter: u64,
}

fn open(path: &Path, clock: &Arc<ManualClock>) -> (Store, Vec<Queue>) {
    let store = Store::builder()
        .clock(clock.clone())
        .open(path)
        .expect("open the model's store");
    let opts = QueueOptions::default().lock_duration(LOCK);
    let q0 = store
        .queue_with("q0", opts.clone().max_deliveries(MAX_DELIVERIES[0]))
        .expect("queue q0");
    let q1 = store.queue_with("q1", opts).expect("queue q1");
    let d0 = q0.dead_letters().expect("dead letters of q0");
    let d1 = q1.dead_letters().expect("dead letters of q1");
    (store, vec![q0, q1, d0, d1])
}

impl Harness {
    fn body(&mut self, len: u8) -> Vec<u8> {
        self.counter += 1;
        let mut b = format!("{:08}", self.counter).into_bytes();
        b.resize(usize::from(len).max(8), b'.');
        b
    }

    fn pick(&self, i: u8) -> Option<usize> {
        (!self.held.is_empty()).then(|| usize::from(i) % self.held.len())
    }

    fn settle(&mut self, i: u8, how: &str) {
        let Some(i) = self.pick(i) else { return };
        let h = self.held.remove(i);
        let result = match how {
            "complete" => h.r.complete(),
            "abandon" => h.r.abandon(),
            "abandon_after" => h.r.abandon_after(DELAY),
            "defer" => h.r.defer(),
            _ if h.r.queue().ends_with("/$deadletterqueue") => h.r.resubmit(),
            _ => h.r.dead_letter("ModelReason", "model description"),
        };
        if h.lost {
            let e = result.expect_err("settling a lost lock must fail");
            assert!(e.is_lock_lost(), "{how}: {}", e.error());
            return;
        }
        if let Err(e) = result {
            panic!("{how} {}: {}", h.id, e.error());
        }
        match how {
            "complete" => self.model.complete(h.id),
            "abandon" => self.model.requeue(h.id),
            "abandon_after" => self.model.abandon_after(h.id),
            "defer" => self.model.defer(h.id),
            _ => self.model.dead_letter_or_resubmit(h.id),
        }
    }

    fn got(&mut self, what: &str, q: usize, got: Option<Received>, want: Option<(u64, u32)>) {
        match (got, want) {
            (None, None) => {}
            (Some(r), Some((id, dc))) => {
                assert_eq!((r.id().get(), r.delivery_count()), (id, dc), "{what} q{q}");
                assert_eq!(r.body(), self.model.msgs[&id].body, "{what} q{q}: body");
                self.held.push(Held { r, id, lost: false });
            }
            (got, want) => panic!(
                "{what} q{q}: store gave {:?}, model expected {want:?}",
                got.map(|r| r.id())
            ),
        }
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Send { q, priority, len } => {
                let (q, priority) = (usize::from(q % 2), priority % 8);
                let body = self.body(len);
                let id = self.queues[q]
                    .send(Message::new(body.clone()).priority(priority))
                    .expect("send");
                self.model.add(id.get(), q, priority, body);
            }
            Op::SendBatch { q, priorities, n } => {
                let q = usize::from(q % 2);
                let priorities = &priorities[..usize::from(n % 4)];
                let bodies: Vec<Vec<u8>> = priorities.iter().map(|_| self.body(10)).collect();
                let msgs = priorities
                    .iter()
                    .zip(&bodies)
                    .map(|(p, b)| Message::new(b.clone()).priority(p % 8));
                let ids = self.queues[q].send_batch(msgs).expect("send_batch");
                assert_eq!(ids.len(), priorities.len());
                for ((id, p), b) in ids.into_iter().zip(priorities).zip(bodies) {
                    self.model.add(id.get(), q, p % 8, b);
                }
            }
            Op::Receive { q } => {
                let q = usize::from(q % 4);
                let got = self.queues[q].try_receive().expect("try_receive");
                let want = self.model.receive(q);
                self.got("receive", q, got, want);
            }
            Op::ReceiveById { q, pick } => {
                let q = usize::from(q % 4);
                // Any id the model knows (in any state or queue), or one it never gave out.
                let ids: Vec<u64> = self.model.msgs.keys().copied().collect();
                let id = ids
                    .get(usize::from(pick) % (ids.len() + 1))
                    .copied()
                    .unwrap_or(self.model.last_id + 1);
                let got = self.queues[q]
                    .receive_by_id(MessageId(id), Duration::ZERO)
                    .expect("receive_by_id");
                let want = match self.model.msgs.get(&id) {
                    Some(m) if m.queue == q && !m.locked && m.due.is_none() => {
                        self.model.lock(q, id)
                    }
                    _ => None,
                };
                self.got("receive_by_id", q, got, want);
            }
            Op::Peek { q } => {
                let q = usize::from(q % 4);
                let got = self.queues[q].peek().expect("peek");
                let want = self.model.ready(q).first().copied();
                assert_eq!(got.as_ref().map(|e| e.id().get()), want, "peek q{q}");
                if let (Some(e), Some(id)) = (got, want) {
                    assert_eq!(e.body(), self.model.msgs[&id].body, "peek q{q}: body");
                }
            }
            Op::Complete(i) => self.settle(i, "complete"),
            Op::Abandon(i) => self.settle(i, "abandon"),
            Op::AbandonAfter(i) => self.settle(i, "abandon_after"),
            Op::DeadLetter(i) => self.settle(i, "dead_letter"),
            Op::Defer(i) => self.settle(i, "defer"),
            Op::Drop(i) => {
                if let Some(i) = self.pick(i) {
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
            } => self.tx(
                usize::from(from % 4),
                n_recv % 3,
                usize::from(to % 2),
                n_send % 3,
                priority % 8,
                end,
            ),
            Op::Purge { q } => {
                let q = usize::from(q % 4);
                let removed = self.queues[q].purge().expect("purge");
                let gone: Vec<u64> = self
                    .model
                    .msgs
                    .iter()
                    .filter(|(_, m)| m.queue == q)
                    .map(|(id, _)| *id)
                    .collect();
                assert_eq!(removed, gone.len() as u64, "purge q{q}");
                for id in gone {
                    self.model.msgs.remove(&id);
                    for h in self.held.iter_mut().filter(|h| h.id == id) {
                        h.lost = true;
                    }
                }
            }
            Op::ExpireLocks => {
                self.clock.advance(LOCK);
                self.model.advance(LOCK);
                for h in &mut self.held {
                    h.lost = true;
                }
            }
            Op::Reopen => {
                self.queues.clear();
                let store = self.store.take().expect("an open store");
                store.close().expect("close");
                for id in self.model.locked_ids() {
                    self.model.requeue(id);
                }
                // The handles outlived their store: dropping them must not disturb anything.
                self.held.clear();
                let (store, queues) = open(&self.path, &self.clock);
                self.store = Some(store);
                self.queues = queues;
            }
        }
    }

    fn tx(&mut self, from: usize, n_recv: u8, to: usize, n_send: u8, p: u8, end: TxEnd) {
        let store = self.store.clone().expect("an open store");
        let mut tx = store.begin();
        let mut received = Vec::new();
        for _ in 0..n_recv {
            let got = tx.try_receive(&self.queues[from]).expect("tx receive");
            let want = self.model.receive(from);
            match (got, want) {
                (None, None) => break,
                (Some(e), Some((id, dc))) => {
                    assert_eq!((e.id().get(), e.delivery_count()), (id, dc), "tx receive");
                    assert_eq!(e.body(), self.model.msgs[&id].body, "tx receive: body");
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
                .expect("tx send");
            bodies.push(body);
        }
        match end {
            TxEnd::Commit => {
                tx.commit().expect("commit");
                for id in received {
                    self.model.complete(id);
                }
                let mut new: Vec<(MessageId, Vec<u8>)> = self.queues[to]
                    .browse()
                    .map(|e| e.expect("browse"))
                    .filter(|e| !self.model.msgs.contains_key(&e.id().get()))
                    .map(|e| (e.id(), e.into_body()))
                    .collect();
                new.sort();
                let got: Vec<&Vec<u8>> = new.iter().map(|(_, b)| b).collect();
                assert_eq!(got, bodies.iter().collect::<Vec<_>>(), "tx sends in order");
                for (id, body) in new {
                    self.model.add(id.get(), to, p, body);
                }
            }
            TxEnd::Abort | TxEnd::Drop => {
                if matches!(end, TxEnd::Abort) {
                    tx.abort().expect("abort");
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
            let s = queue.stats().expect("stats");
            let dead = if q < 2 {
                in_q_of(&self.model, q + 2)
            } else {
                0
            };
            let bytes: u64 = self
                .model
                .msgs
                .values()
                .filter(|m| m.queue == q)
                .map(|m| m.body.len() as u64)
                .sum();
            let expected = (
                in_q(&|m| m.ready()),
                in_q(&|m| m.locked),
                in_q(&|m| m.due.is_some()),
                in_q(&|m| m.deferred && !m.locked),
                dead,
                bytes,
            );
            assert_eq!(
                (
                    s.active,
                    s.locked,
                    s.scheduled,
                    s.deferred,
                    s.dead_lettered,
                    s.bytes
                ),
                expected,
                "counts of queue {q} after step {step} ({op:?})"
            );
            let browsed: Vec<(u64, u32)> = queue
                .browse()
                .map(|e| {
                    let e = e.expect("browse");
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

fn in_q_of(model: &Model, q: usize) -> u64 {
    model.msgs.values().filter(|m| m.queue == q).count() as u64
}

pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS && !u.is_empty() {
        match Op::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    if ops.is_empty() {
        return;
    }
    let dir = crate::tempdir();
    let path = dir.path().join("model.postbox");
    let clock = ManualClock::new();
    let (store, queues) = open(&path, &clock);
    let mut h = Harness {
        path,
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
    h.held.clear();
    h.queues.clear();
    if let Some(store) = h.store.take() {
        store.close().expect("close");
    }
}
