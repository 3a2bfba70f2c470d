//! Incoming: a broker queue consumed into a local queue.
//!
//! Deliveries (at most `prefetch` unacknowledged) are gathered into a batch, sent to the
//! local queue in one durable commit, and only then acknowledged to the broker (one `ack`
//! with `multiple`). A crash between the two leaves the batch in both places: the broker
//! delivers it again, and each copy carries the AMQP `message-id` as its `message_key`, so a
//! local queue with a `dedup_window` keeps one. One consumer per link and batches in order keep
//! every group's order.
//!
//! A delivery the local queue refuses for good (too large, an invalid property) is rejected
//! without requeue, so the broker applies its own dead-letter policy (`x-dead-letter-exchange`,
//! or dropping it when it has none). A transient refusal (a full queue or disk) is retried
//! with the backoff while the deliveries wait unacknowledged.

use std::sync::atomic::Ordering::Relaxed;

use futures_util::{FutureExt, StreamExt};
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::FieldTable;
use postbox::{ErrorKind, Message};

use crate::backoff::Backoff;
use crate::connect::{Link, SETUP, within};
use crate::mapping;
use crate::stats::Counters;

enum Stored {
    /// Every delivery is stored, except those rejected (their indexes).
    Done(Vec<usize>),
    /// The store closed or the bridge stops: nothing more can be stored.
    Stop,
}

fn permanent(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::TooLarge | ErrorKind::InvalidArgument | ErrorKind::Codec
    )
}

/// Runs one incoming link until the bridge stops.
pub(crate) async fn run(mut link: Link) {
    let mut backoff = Backoff::new(&link.retry);
    let mut first = true;
    let queue_name = link.config.queue.clone().unwrap_or_default();
    let max = link.config.batch as usize;
    'connections: loop {
        let Some((conn, ch)) = link.connect(&mut backoff, &mut first).await else {
            break;
        };
        let consumer = within(SETUP, async {
            ch.basic_qos(link.config.prefetch, BasicQosOptions::default())
                .await?;
            ch.basic_consume(
                queue_name.as_str().into(),
                format!("postbox-bridge-{}", link.config.local).into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
        })
        .await;
        let mut consumer = match consumer {
            Ok(c) => {
                link.up();
                c
            }
            Err(e) => {
                link.lost(&format!("cannot consume {queue_name:?}: {e}"));
                let _ = conn.close(200, "postbox bridge".into()).await;
                if link.pause(backoff.fail()).await {
                    break;
                }
                continue;
            }
        };
        let mut stop = link.stop.clone();
        let why = loop {
            let next = tokio::select! {
                d = consumer.next() => d,
                _ = stop.changed() => break None,
            };
            let mut batch: Vec<Delivery> = Vec::new();
            let mut failed = None;
            match next {
                Some(Ok(d)) => batch.push(d),
                Some(Err(e)) => break Some(format!("consumer: {e}")),
                None => break Some("the broker cancelled the consumer".into()),
            }
            while batch.len() < max {
                match consumer.next().now_or_never() {
                    Some(Some(Ok(d))) => batch.push(d),
                    Some(Some(Err(e))) => {
                        failed = Some(format!("consumer: {e}"));
                        break;
                    }
                    Some(None) => {
                        failed = Some("the broker cancelled the consumer".into());
                        break;
                    }
                    None => break,
                }
            }
            link.counters.in_flight.store(batch.len() as u64, Relaxed);
            let rejected = match store(&mut link, &batch, &mut backoff).await {
                Stored::Done(r) => r,
                Stored::Stop => break None,
            };
            if let Err(e) = settle(&ch, &batch, &rejected).await {
                // Committed locally, not acknowledged: the broker delivers these again.
                break Some(format!("acknowledging: {e}"));
            }
            backoff.reset();
            Counters::add(
                &link.counters.forwarded,
                (batch.len() - rejected.len()) as u64,
            );
            Counters::add(&link.counters.rejected, rejected.len() as u64);
            link.counters.in_flight.store(0, Relaxed);
            if let Some(f) = failed {
                break Some(f);
            }
        };
        let _ = conn.close(200, "postbox bridge".into()).await;
        link.counters.in_flight.store(0, Relaxed);
        match why {
            None => break 'connections,
            Some(e) => {
                link.lost(&e);
                if link.pause(backoff.fail()).await {
                    break;
                }
            }
        }
    }
    link.counters.connected.store(false, Relaxed);
}

/// Stores a batch locally: all in one commit when it can, else one by one to find the
/// deliveries the queue refuses for good.
async fn store(link: &mut Link, batch: &[Delivery], backoff: &mut Backoff) -> Stored {
    let messages: Vec<Message> = batch
        .iter()
        .map(|d| mapping::from_amqp(d.data.clone(), &d.properties))
        .collect();
    loop {
        let q = link.queue.clone();
        let all = messages.clone();
        let r = tokio::task::spawn_blocking(move || q.send_batch(all)).await;
        let e = match r {
            Ok(Ok(_)) => return Stored::Done(Vec::new()),
            Ok(Err(e)) => e,
            Err(join) => postbox::Error::Panic(join.to_string()),
        };
        if e.kind() == ErrorKind::Closed {
            link.counters.set_error("the store was closed".into());
            return Stored::Stop;
        }
        if permanent(e.kind()) {
            break;
        }
        Counters::add(&link.counters.local_retries, 1);
        link.counters
            .set_error(format!("local send: {e}; retrying"));
        if link.pause(backoff.fail()).await {
            return Stored::Stop;
        }
    }
    let mut rejected = Vec::new();
    for (i, m) in messages.into_iter().enumerate() {
        loop {
            let q = link.queue.clone();
            let one = m.clone();
            let r = tokio::task::spawn_blocking(move || q.send(one)).await;
            let e = match r {
                Ok(Ok(_)) => break,
                Ok(Err(e)) => e,
                Err(join) => postbox::Error::Panic(join.to_string()),
            };
            if e.kind() == ErrorKind::Closed {
                return Stored::Stop;
            }
            if permanent(e.kind()) {
                link.counters
                    .set_error(format!("delivery refused by the local queue: {e}"));
                rejected.push(i);
                break;
            }
            Counters::add(&link.counters.local_retries, 1);
            if link.pause(backoff.fail()).await {
                return Stored::Stop;
            }
        }
    }
    Stored::Done(rejected)
}

/// Rejects the refused deliveries, then acknowledges the rest with one `multiple` ack up to
/// the last stored one.
async fn settle(
    ch: &lapin::Channel,
    batch: &[Delivery],
    rejected: &[usize],
) -> Result<(), lapin::Error> {
    for &i in rejected {
        ch.basic_reject(batch[i].delivery_tag, BasicRejectOptions { requeue: false })
            .await?;
    }
    let last = (0..batch.len())
        .rev()
        .find(|i| !rejected.contains(i))
        .map(|i| batch[i].delivery_tag);
    if let Some(tag) = last {
        ch.basic_ack(tag, BasicAckOptions { multiple: true })
            .await?;
    }
    Ok(())
}
