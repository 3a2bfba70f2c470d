//! Outgoing: a local queue drained into the broker.
//!
//! Three parts run per link. A *feeder* thread takes messages from the local queue with
//! peek-lock, never holding more than `in_flight` at once. The *publisher* task publishes
//! them on a channel in confirm mode, in the order taken, and waits for the broker's
//! confirms, many in flight. A *settler* thread completes each message locally only after its
//! confirm, a batch per commit. A message is therefore always in at least one place that
//! survives a crash: the local store until the broker confirmed it, the broker after.
//!
//! Order: after a dropped connection every unconfirmed message is published again in the
//! order taken (the first copies may have reached the broker: the copies carry the same
//! `message-id`). A negative confirm is retried after the backoff; so that it cannot let a
//! later message of its group overtake it, a message with a `group` is published only once
//! the one before it in its group is confirmed: one in flight per group, any number of groups
//! at once, and ungrouped messages without limit.
//!
//! Poison: a message the broker returns as unroutable, or that made the broker close the
//! channel `poison_after` times while it was alone in flight, is dead-lettered locally with
//! the broker's words. After a channel closed by the broker, the messages that were in flight
//! are sent again one at a time until each is confirmed, to tell which one the broker refuses.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use lapin::Confirmation;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{Channel, Connection};
use parking_lot::{Condvar, Mutex};
use postbox::{Queue, Received};
use tokio::sync::mpsc as tmpsc;

use crate::backoff::Backoff;
use crate::connect::{Link, SETUP, within};
use crate::mapping;
use crate::stats::Counters;

/// How long a stopping link waits for confirms already due before it gives messages back.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Longest a local receive waits, so that the feeder notices a stop.
const POLL: Duration = Duration::from_millis(100);

/// How many messages the link holds (taken and not yet settled), shared with the feeder; the
/// link's `in_flight` gauge follows it.
struct Gate {
    held: Mutex<usize>,
    room: Condvar,
    counters: Arc<Counters>,
}

impl Gate {
    fn wait_room(&self, window: usize, timeout: Duration) -> usize {
        let mut held = self.held.lock();
        if *held >= window {
            self.room.wait_for(&mut held, timeout);
        }
        window.saturating_sub(*held)
    }
    fn add(&self, n: usize) {
        let mut held = self.held.lock();
        *held += n;
        self.counters.in_flight.store(*held as u64, Relaxed);
    }
    fn sub(&self, n: usize) {
        let mut held = self.held.lock();
        *held = held.saturating_sub(n);
        self.counters.in_flight.store(*held as u64, Relaxed);
        self.room.notify_all();
    }
}

/// What the settler does with messages the publisher is done with.
enum Settle {
    Complete(Vec<Received>),
    DeadLetter(Box<Received>, String),
    Release(Vec<Received>),
}

struct Held {
    msg: Received,
    published: bool,
    /// Published before, on this or an earlier channel.
    sent_before: bool,
    retry_at: Option<Instant>,
    /// When it was last published.
    published_at: Instant,
    /// Channel closes by the broker while this message was alone in flight.
    refusals: u32,
}

/// The publisher's state, which outlives connections.
struct Publisher {
    held: BTreeMap<u64, Held>,
    /// Per group, the first message not yet confirmed: only it may be in flight.
    head: HashMap<String, u64>,
    /// After the broker closed a channel: the messages then in flight, sent one at a time.
    suspects: BTreeSet<u64>,
    next_seq: u64,
    /// Since when every confirm on this channel has been negative (reset by a positive one).
    nacking_since: Option<Instant>,
    settle: mpsc::Sender<Settle>,
    done: Vec<Received>,
}

impl Publisher {
    fn take(&mut self, batch: Vec<Received>) {
        for msg in batch {
            let seq = self.next_seq;
            self.next_seq += 1;
            if let Some(g) = msg.envelope().group() {
                self.head.entry(g.to_owned()).or_insert(seq);
            }
            self.held.insert(
                seq,
                Held {
                    msg,
                    published: false,
                    sent_before: false,
                    retry_at: None,
                    published_at: Instant::now(),
                    refusals: 0,
                },
            );
        }
    }

    /// Removes a settled message; the next of its group becomes the group's head.
    fn remove(&mut self, seq: u64) -> Option<Received> {
        let h = self.held.remove(&seq)?;
        self.suspects.remove(&seq);
        if let Some(g) = h.msg.envelope().group()
            && self.head.get(g) == Some(&seq)
        {
            let next = self
                .held
                .range(seq..)
                .find(|(_, o)| o.msg.envelope().group() == Some(g))
                .map(|(s, _)| *s);
            match next {
                Some(s) => self.head.insert(g.to_owned(), s),
                None => self.head.remove(g),
            };
        }
        Some(h.msg)
    }

    fn may_publish(&self, seq: u64, h: &Held, now: Instant) -> bool {
        !h.published
            && h.retry_at.is_none_or(|t| t <= now)
            && h.msg
                .envelope()
                .group()
                .is_none_or(|g| self.head.get(g) == Some(&seq))
    }

    fn flush(&mut self) {
        if !self.done.is_empty() {
            let _ = self
                .settle
                .send(Settle::Complete(std::mem::take(&mut self.done)));
        }
    }
}

type Confirm = futures_util::future::BoxFuture<'static, (u64, Result<Confirmation, lapin::Error>)>;

/// Runs one outgoing link until the bridge stops.
pub(crate) async fn run(mut link: Link) {
    let window = link.config.in_flight as usize;
    let gate = Arc::new(Gate {
        held: Mutex::new(0),
        room: Condvar::new(),
        counters: link.counters.clone(),
    });
    let feeding = Arc::new(AtomicBool::new(true));
    let (tx, mut rx) = tmpsc::channel::<Vec<Received>>(8);
    let feeder = {
        let (q, gate, feeding, counters) = (
            link.queue.clone(),
            gate.clone(),
            feeding.clone(),
            link.counters.clone(),
        );
        let batch = link.config.batch as usize;
        let retry = link.retry.clone();
        std::thread::Builder::new()
            .name("postbox-bridge-feed".into())
            .spawn(move || feed(&q, &gate, &tx, &feeding, window, batch, &counters, &retry))
    };
    let (settle_tx, settle_rx) = mpsc::channel();
    let settler = {
        let (q, gate, counters) = (link.queue.clone(), gate.clone(), link.counters.clone());
        std::thread::Builder::new()
            .name("postbox-bridge-settle".into())
            .spawn(move || settle(&q, &settle_rx, &gate, &counters))
    };
    let (feeder, settler) = match (feeder, settler) {
        (Ok(f), Ok(s)) => (f, s),
        (f, s) => {
            feeding.store(false, Relaxed);
            link.counters
                .set_error("cannot start the link's threads".into());
            drop((f, s));
            return;
        }
    };

    let lock_duration = link
        .queue
        .options()
        .map_or(Duration::from_secs(30), |o| o.lock_duration);
    let mut p = Publisher {
        held: BTreeMap::new(),
        head: HashMap::new(),
        suspects: BTreeSet::new(),
        next_seq: 0,
        nacking_since: None,
        settle: settle_tx,
        done: Vec::new(),
    };
    let mut backoff = Backoff::new(&link.retry);
    let mut first = true;
    let mut stop_by: Option<Instant> = None;
    while stop_by.is_none() {
        let Some((conn, ch)) =
            connected(&mut link, &mut p, &mut backoff, &mut first, lock_duration).await
        else {
            break;
        };
        for h in p.held.values_mut() {
            if h.published {
                h.published = false;
                h.sent_before = true;
            }
        }
        let why = publish_on(
            &mut link,
            &mut p,
            &ch,
            &mut rx,
            &mut backoff,
            &feeding,
            &mut stop_by,
            lock_duration,
        )
        .await;
        let _ = conn.close(200, "postbox bridge".into()).await;
        match why {
            Ended::Done => break,
            Ended::Lost(e) => {
                link.lost(&e);
                if link.pause(backoff.fail()).await {
                    break;
                }
            }
        }
    }
    // Stopped: nothing more is published; what is still held goes back uncounted.
    feeding.store(false, Relaxed);
    gate.room.notify_all();
    rx.close();
    while let Ok(batch) = rx.try_recv() {
        p.take(batch);
    }
    p.flush();
    let rest: Vec<Received> = std::mem::take(&mut p.held)
        .into_values()
        .map(|h| h.msg)
        .collect();
    if !rest.is_empty() {
        let _ = p.settle.send(Settle::Release(rest));
    }
    drop(p);
    link.counters.connected.store(false, Relaxed);
    let _ = tokio::task::spawn_blocking(move || {
        let _ = feeder.join();
        let _ = settler.join();
    })
    .await;
}

/// Connects (in confirm mode) unless the bridge is stopping, renewing the locks of what it
/// holds while the broker is away so that an outage of any length costs no delivery.
async fn connected(
    link: &mut Link,
    p: &mut Publisher,
    backoff: &mut Backoff,
    first: &mut bool,
    lock_duration: Duration,
) -> Option<(Connection, Channel)> {
    let mut next = 0usize;
    loop {
        if link.stopping() {
            return None;
        }
        let attempt = match link.connect_once(&mut next, first).await {
            Ok((conn, ch)) => {
                match within(SETUP, ch.confirm_select(ConfirmSelectOptions::default())).await {
                    Ok(()) => {
                        link.up();
                        return Some((conn, ch));
                    }
                    Err(e) => {
                        let _ = conn.close(200, "postbox bridge".into()).await;
                        format!("confirm mode refused: {e}")
                    }
                }
            }
            Err(e) => e,
        };
        link.counters.set_error(attempt);
        renew(link, p, lock_duration);
        if link.pause(backoff.fail()).await {
            return None;
        }
    }
}

enum Ended {
    Done,
    Lost(String),
}

#[allow(clippy::too_many_arguments)]
async fn publish_on(
    link: &mut Link,
    p: &mut Publisher,
    ch: &Channel,
    rx: &mut tmpsc::Receiver<Vec<Received>>,
    backoff: &mut Backoff,
    feeding: &AtomicBool,
    stop_by: &mut Option<Instant>,
    lock_duration: Duration,
) -> Ended {
    let mut confirms: FuturesUnordered<Confirm> = FuturesUnordered::new();
    let mut renew_at = Instant::now() + lock_duration / 3;
    let confirm_timeout = link.retry.confirm_timeout();
    let mut stop = link.stop.clone();
    p.nacking_since = None;
    loop {
        // A channel opened just after its quorum queue's leader died can go on refusing every
        // publish after a new leader is elected (seen with RabbitMQ 3.10); a new channel
        // takes them.
        if p.nacking_since
            .is_some_and(|t| t.elapsed() >= confirm_timeout)
        {
            return Ended::Lost(format!(
                "every publish refused for {confirm_timeout:?}; reconnecting"
            ));
        }
        if let Err(e) = publish_ready(link, p, ch, &mut confirms).await {
            return Ended::Lost(refused(link, p, &e));
        }
        if let Some(t) = *stop_by
            && (confirms.is_empty() || Instant::now() >= t)
        {
            return Ended::Done;
        }
        // A confirm that never comes (a channel left talking to a queue leader that died) is
        // a lost channel: the oldest publish, nearly always the first held, sets the limit.
        let overdue_at = p
            .held
            .values()
            .find(|h| h.published)
            .map(|h| h.published_at + confirm_timeout);
        let wake = p
            .held
            .values()
            .filter(|h| !h.published)
            .filter_map(|h| h.retry_at)
            .min()
            .unwrap_or(renew_at)
            .min(renew_at)
            .min(stop_by.unwrap_or(renew_at))
            .min(overdue_at.unwrap_or(renew_at));
        tokio::select! {
            got = rx.recv(), if stop_by.is_none() => match got {
                Some(batch) => p.take(batch),
                None => *stop_by = Some(Instant::now() + STOP_GRACE),
            },
            Some((seq, r)) = confirms.next(), if !confirms.is_empty() => {
                let mut outcome = confirmed(link, p, seq, r, backoff);
                while outcome.is_ok() {
                    match confirms.next().now_or_never() {
                        Some(Some((seq, r))) => outcome = confirmed(link, p, seq, r, backoff),
                        _ => break,
                    }
                }
                p.flush();
                if let Err(e) = outcome {
                    return Ended::Lost(refused(link, p, &e));
                }
            },
            _ = stop.changed(), if stop_by.is_none() => {
                *stop_by = Some(Instant::now() + STOP_GRACE);
                feeding.store(false, Relaxed);
                // Not yet published: back to the queue now, uncounted.
                let unsent: Vec<u64> = p.held.iter().filter(|(_, h)| !h.published).map(|(s, _)| *s).collect();
                let back: Vec<Received> = unsent.into_iter().filter_map(|s| p.remove(s)).collect();
                if !back.is_empty() {
                    let _ = p.settle.send(Settle::Release(back));
                }
            },
            _ = tokio::time::sleep_until(wake.into()) => {
                if overdue_at.is_some_and(|t| Instant::now() >= t) && stop_by.is_none() {
                    return Ended::Lost(format!(
                        "no confirm within {confirm_timeout:?}; reconnecting"
                    ));
                }
                if Instant::now() >= renew_at {
                    renew(link, p, lock_duration);
                    renew_at = Instant::now() + lock_duration / 3;
                }
            },
        }
        if stop_by.is_some() {
            // Messages that arrive while stopping are given back unpublished.
            let unsent: Vec<u64> = p
                .held
                .iter()
                .filter(|(_, h)| !h.published)
                .map(|(s, _)| *s)
                .collect();
            let back: Vec<Received> = unsent.into_iter().filter_map(|s| p.remove(s)).collect();
            if !back.is_empty() {
                let _ = p.settle.send(Settle::Release(back));
            }
        }
    }
}

/// Publishes every held message that may go now, in the order taken.
async fn publish_ready(
    link: &Link,
    p: &mut Publisher,
    ch: &Channel,
    confirms: &mut FuturesUnordered<Confirm>,
) -> Result<(), lapin::Error> {
    let now = Instant::now();
    let isolating = !p.suspects.is_empty();
    if isolating && !confirms.is_empty() {
        return Ok(());
    }
    let ready: Vec<u64> = p
        .held
        .iter()
        .filter(|(seq, h)| p.may_publish(**seq, h, now))
        .filter(|(seq, _)| !isolating || p.suspects.contains(seq))
        .map(|(seq, _)| *seq)
        .take(if isolating { 1 } else { usize::MAX })
        .collect();
    let wall = SystemTime::now();
    for seq in ready {
        let Some(h) = p.held.get_mut(&seq) else {
            continue;
        };
        let env = h.msg.envelope();
        let props = mapping::to_amqp(env, wall);
        let publish = ch.basic_publish(
            link.config.exchange_name().into(),
            link.config.routing_key_name().into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            env.body(),
            props,
        );
        // A broker that stops reading (flow control towards a queue without a leader) would
        // hold the write for good: past the confirm timeout the channel counts as lost.
        let confirm = within(link.retry.confirm_timeout(), publish).await?;
        if h.sent_before {
            Counters::add(&link.counters.republished, 1);
        }
        h.published = true;
        h.published_at = Instant::now();
        h.retry_at = None;
        confirms.push(Box::pin(async move { (seq, confirm.await) }));
    }
    Ok(())
}

/// Handles one confirm. An error means the channel is gone.
fn confirmed(
    link: &Link,
    p: &mut Publisher,
    seq: u64,
    r: Result<Confirmation, lapin::Error>,
    backoff: &mut Backoff,
) -> Result<(), lapin::Error> {
    match r? {
        Confirmation::Ack(None) | Confirmation::NotRequested => {
            backoff.reset();
            p.nacking_since = None;
            if let Some(m) = p.remove(seq) {
                p.done.push(m);
                if p.done.len() >= link.config.batch as usize {
                    p.flush();
                }
            }
        }
        Confirmation::Ack(Some(returned)) => {
            // Unroutable: no retry can help; the broker's reason goes with it.
            if let Some(m) = p.remove(seq) {
                let why = format!(
                    "the broker returned it: {} {}",
                    returned.reply_code, returned.reply_text
                );
                let _ = p.settle.send(Settle::DeadLetter(Box::new(m), why));
            }
        }
        Confirmation::Nack(_) => {
            Counters::add(&link.counters.nacked, 1);
            p.nacking_since.get_or_insert_with(Instant::now);
            link.counters
                .set_error(format!("the broker refused message {seq} (nack); retrying"));
            let wait = backoff.fail();
            if let Some(h) = p.held.get_mut(&seq) {
                h.published = false;
                h.sent_before = true;
                h.retry_at = Some(Instant::now() + wait);
            }
        }
    }
    Ok(())
}

/// The channel failed with `e`: if the broker closed it while one message was alone in
/// flight, that message is a suspect once more, and poison after `poison_after` times.
fn refused(link: &Link, p: &mut Publisher, e: &lapin::Error) -> String {
    let in_flight: Vec<u64> = p
        .held
        .iter()
        .filter(|(_, h)| h.published)
        .map(|(s, _)| *s)
        .collect();
    if refused_for_content(e) {
        if let [only] = in_flight[..] {
            let poison = p.held.get_mut(&only).is_some_and(|h| {
                h.refusals += 1;
                h.refusals >= link.retry.poison_after.max(1)
            });
            if poison && let Some(m) = p.remove(only) {
                let _ = p.settle.send(Settle::DeadLetter(
                    Box::new(m),
                    format!("the broker refused it: {e}"),
                ));
            }
        } else {
            p.suspects.extend(in_flight);
        }
    }
    format!("channel lost: {e}")
}

/// Whether the broker closed the channel over what was published (PRECONDITION_FAILED: a
/// message over its `max_message_size`, say), rather than over the link's setup (a missing
/// exchange, no permission), which no message is to blame for and is retried instead.
fn refused_for_content(e: &lapin::Error) -> bool {
    use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
    matches!(e.kind(), lapin::ErrorKind::ProtocolError(p)
        if matches!(p.kind(), AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED)))
}

/// Renews the locks of held messages that would expire before the next round.
fn renew(link: &Link, p: &mut Publisher, lock_duration: Duration) {
    let soon = SystemTime::now() + lock_duration / 2;
    let due: Vec<u64> = p
        .held
        .iter()
        .filter(|(_, h)| h.msg.locked_until() < soon)
        .map(|(s, _)| *s)
        .collect();
    let mut lost = Vec::new();
    tokio::task::block_in_place(|| {
        for seq in due {
            if let Some(h) = p.held.get_mut(&seq)
                && let Err(e) = h.msg.renew_lock()
            {
                if e.is_lock_lost() {
                    lost.push(seq);
                }
                Counters::add(&link.counters.local_retries, 1);
                link.counters.set_error(format!("lock renewal: {e}"));
            }
        }
    });
    // A lost lock: the queue gives the message out again, and it is forwarded again then.
    for seq in lost {
        if let Some(m) = p.remove(seq) {
            drop(m);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn feed(
    q: &Queue,
    gate: &Gate,
    tx: &tmpsc::Sender<Vec<Received>>,
    feeding: &AtomicBool,
    window: usize,
    batch: usize,
    counters: &Counters,
    retry: &crate::config::RetryConfig,
) {
    let mut backoff = Backoff::new(retry);
    while feeding.load(Relaxed) {
        // Taking messages while the broker is away would only hold their locks for nothing.
        if !counters.connected.load(Relaxed) {
            std::thread::sleep(POLL);
            continue;
        }
        let room = gate.wait_room(window, POLL);
        if room == 0 {
            continue;
        }
        match q.receive_batch(room.min(batch), POLL) {
            Ok(got) if got.is_empty() => {}
            Ok(got) => {
                backoff.reset();
                gate.add(got.len());
                if let Err(back) = tx.blocking_send(got) {
                    let n = back.0.len();
                    for m in back.0 {
                        let _ = m.release();
                    }
                    gate.sub(n);
                    return;
                }
            }
            Err(e) if e.kind() == postbox::ErrorKind::Closed => {
                counters.set_error("the store was closed".into());
                return;
            }
            Err(e) => {
                Counters::add(&counters.local_retries, 1);
                counters.set_error(format!("local receive: {e}"));
                std::thread::sleep(backoff.fail().min(Duration::from_secs(1)));
            }
        }
    }
}

fn settle(q: &Queue, rx: &mpsc::Receiver<Settle>, gate: &Gate, counters: &Counters) {
    while let Ok(job) = rx.recv() {
        match job {
            Settle::Complete(batch) => {
                let n = batch.len();
                match q.complete_batch(batch) {
                    Ok(()) => Counters::add(&counters.forwarded, n as u64),
                    Err(e) => {
                        // The queue gives them out again and they are forwarded again: the
                        // broker sees a second copy with the same message-id.
                        Counters::add(&counters.local_retries, 1);
                        counters.set_error(format!("local completion: {e}"));
                    }
                }
                gate.sub(n);
            }
            Settle::DeadLetter(m, why) => {
                match m.dead_letter("BrokerRefused", &why) {
                    Ok(()) => Counters::add(&counters.dead_lettered, 1),
                    Err(e) => counters.set_error(format!("local dead-letter: {}", e.error())),
                }
                gate.sub(1);
            }
            Settle::Release(batch) => {
                let n = batch.len();
                for m in batch {
                    let _ = m.release();
                }
                gate.sub(n);
            }
        }
    }
}
