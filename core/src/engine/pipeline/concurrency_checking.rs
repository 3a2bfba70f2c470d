//! Concurrency checks of the pipeline's leader hand-off and of parked receives racing their
//! timeouts: the real `Pipeline`, `park::serve_with` and `wait::await_answer` under shuttle's
//! schedulers, with a stand-in for the store (see docs/design.md § Concurrency checking).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use shuttle::rand::Rng;

use super::writer::Round;
use super::{Msg, Pipeline, Writer};
use crate::engine::batch::Locked;
use crate::engine::park::{self, ParkState, ParkedReceive};
use crate::engine::wait::{Cancel, await_answer};
use crate::error::Error;
use crate::message::{Envelope, MessageId, Properties};
use crate::options::Durability;
use crate::sync::answers::Reply;
use crate::sync::channel;
use crate::sync::{Mutex, check, thread};

/// A job of the stand-in: adds `send` (a message id) to the queue, answers `id` once.
struct FakeJob {
    id: u64,
    send: Option<u64>,
    reply: Reply<u64>,
}

/// The store, reduced to one queue of message ids.
struct Fake {
    durability: Durability,
    queue: Mutex<VecDeque<u64>>,
}

/// What `serve_with` sees of a batch.
struct FakeBatch<'a> {
    queue: &'a mut VecDeque<u64>,
    woken: bool,
}

impl Writer for Fake {
    type Job = FakeJob;

    fn durability(&self) -> Durability {
        self.durability
    }

    fn reap_as(&self) -> Option<(u64, u64)> {
        None
    }

    fn due_in_ms(&self) -> u64 {
        u64::MAX
    }

    fn run(&self, jobs: Vec<FakeJob>, parked: &mut Vec<ParkedReceive>, round: Round) {
        let timer = round.timer;
        let mut queue = self.queue.lock();
        let mut b = FakeBatch {
            queue: &mut queue,
            woken: false,
        };
        for j in &jobs {
            if let Some(m) = j.send {
                b.queue.push_back(m);
                b.woken = true;
            }
        }
        let served = park::serve_with(
            &mut b,
            parked,
            timer,
            |b, _| b.woken,
            |b, p| {
                Ok(Ok(b
                    .queue
                    .drain(..p.max.min(b.queue.len()))
                    .map(locked)
                    .collect()))
            },
        )
        .unwrap_or_else(|_| panic!("the stand-in never fails"));
        drop(queue);
        // Committed: the callers hear of it.
        for j in jobs {
            j.reply.send(j.id);
        }
        for s in served {
            s.answer(None);
        }
    }
}

fn locked(id: u64) -> Locked {
    Locked {
        envelope: Envelope {
            id: MessageId(id),
            queue: "q".into(),
            body: Vec::new(),
            props: Properties::default(),
            priority: 0,
            enqueued_at: SystemTime::UNIX_EPOCH,
            visible_at: None,
            expires_at: None,
            delivery_count: 1,
            dead_letter: None,
        },
        token: id,
        locked_until: 0,
    }
}

fn start(durability: Durability) -> Arc<Pipeline<Fake>> {
    let fake = Fake {
        durability,
        queue: Mutex::new(VecDeque::new()),
    };
    Arc::new(Pipeline::start(fake).expect("the writer thread starts"))
}

/// Submits a job as `Pipeline::call` does and waits for its one answer.
fn call(p: &Pipeline<Fake>, id: u64, send: Option<u64>) {
    let (reply, rx) = p.shared.answers.pair();
    p.enqueue(FakeJob { id, send, reply })
        .expect("the pipeline is open");
    // `Reply::send` takes the reply: one result at most.
    assert_eq!(rx.recv(), Ok(id), "job {id} got its own result");
}

/// Stops the pipeline as `Pipeline::stop` does; returns the messages left in the queue.
fn stop(p: &Pipeline<Fake>) -> Vec<u64> {
    let (reply, rx) = p.shared.answers.pair();
    let last = FakeJob {
        id: u64::MAX,
        send: None,
        reply,
    };
    let answered = p.close(last, || rx.recv().map_err(|_| Error::Closed));
    assert_eq!(answered.ok(), Some(u64::MAX), "the closing job is answered");
    p.shared.ctx.queue.lock().iter().copied().collect()
}

/// Callers submit at once, some may lead and one hands its job to the writer thread (as
/// `detach` does): every job gets exactly its own result, nobody waits forever (shuttle
/// reports a deadlock), and the stop finds the writer thread able to exit.
#[test]
fn every_job_gets_one_result_and_the_lead_passes_on() {
    check(|| {
        let durability = if shuttle::rand::thread_rng().gen_bool(0.5) {
            // A durable batch gathers callers of the last one with a timed wait.
            Durability::Immediate
        } else {
            Durability::None
        };
        let p = start(durability);
        let callers: Vec<_> = (0..3u64)
            .map(|t| {
                let p = p.clone();
                thread::spawn(move || {
                    for k in 0..2 {
                        call(&p, t * 10 + k, None);
                    }
                })
            })
            .collect();
        let (reply, detached) = p.shared.answers.pair();
        let job = FakeJob {
            id: 99,
            send: None,
            reply,
        };
        let may_lead = p.shared.submit(Msg::Job(job), false).expect("open");
        assert!(!may_lead, "a caller that may not lead never leads");
        for c in callers {
            c.join().expect("caller");
        }
        assert_eq!(detached.recv(), Ok(99), "a handed-off job is run too");
        stop(&p);
    });
}

/// A receiver parks with a deadline, a sender's commit serves it, and its timeout (chosen by
/// the scheduler) races the serving; another receiver is cancelled. Every message sent is
/// delivered once or is still in the queue after the stop, and every receiver returns.
#[test]
fn a_parked_receive_that_times_out_loses_no_message() {
    check(|| {
        let p = start(Durability::None);
        let cancel = Cancel::default();
        let far = Instant::now() + Duration::from_secs(3600);
        // Far: only the receiver's own timer ends it. Now: the writer answers it at once.
        let deadlines = [Some(far), Some(Instant::now()), None];
        let receivers: Vec<_> = deadlines
            .into_iter()
            .enumerate()
            .map(|(i, deadline)| {
                let p = p.clone();
                let cancel = cancel.clone();
                thread::spawn(move || {
                    let state = ParkState::new();
                    let (reply, answer) = channel::bounded(1);
                    p.park(ParkedReceive {
                        q: 1,
                        name: "q".into(),
                        owner: 1,
                        max: 1,
                        deadline,
                        state: state.clone(),
                        reply,
                        hook: None,
                    })
                    .expect("open");
                    let cancel = deadline.is_none().then_some(&cancel);
                    let got = await_answer(&state, &answer, deadline, cancel, || Error::Closed)
                        .unwrap_or_else(|e| panic!("receiver {i}: {e}"));
                    got.into_iter().map(|l| l.token).collect::<Vec<_>>()
                })
            })
            .collect();
        let sender = {
            let p = p.clone();
            thread::spawn(move || {
                call(&p, 1, Some(101));
                call(&p, 2, Some(102));
            })
        };
        sender.join().expect("sender");
        cancel.cancel();
        let mut seen = Vec::new();
        for r in receivers {
            seen.extend(r.join().expect("receiver"));
        }
        seen.extend(stop(&p));
        seen.sort_unstable();
        assert_eq!(
            seen,
            [101, 102],
            "each message delivered once or left in the queue"
        );
    });
}
