//! Getting a channel to the broker: the brokers in turn, each refusal waited out with the
//! backoff, and the link's queue declared on every new channel.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::config::LinkConfig;
use crate::stats::Counters;

/// How long one step of setting a channel up may take (connecting, declaring, confirm mode,
/// consuming): a broker that accepts the connection and then never answers (a node still
/// electing its queue leaders) is left for the next one.
pub(crate) const SETUP: Duration = Duration::from_secs(10);

/// `fut`, or a timed-out I/O error after `limit`.
pub(crate) async fn within<T>(
    limit: Duration,
    fut: impl std::future::Future<Output = Result<T, lapin::Error>>,
) -> Result<T, lapin::Error> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(lapin::Error::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the broker did not answer within {limit:?}"),
        ))),
    }
}

/// What every link task is given.
pub(crate) struct Link {
    pub config: LinkConfig,
    pub brokers: Vec<String>,
    pub retry: crate::config::RetryConfig,
    pub queue: postbox::Queue,
    pub counters: Arc<Counters>,
    pub stop: watch::Receiver<bool>,
}

impl Link {
    pub(crate) fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps for `d`, or less if the bridge is told to stop; returns whether it is stopping.
    pub(crate) async fn pause(&mut self, d: Duration) -> bool {
        if self.stopping() {
            return true;
        }
        let _ = tokio::time::timeout(d, self.stop.changed()).await;
        self.stopping()
    }

    /// A connection and a channel with the queue declared, or `None` once the bridge is told
    /// to stop. Tries each broker in turn; every failure waits out the backoff.
    pub(crate) async fn connect(
        &mut self,
        backoff: &mut Backoff,
        first: &mut bool,
    ) -> Option<(Connection, Channel)> {
        let mut next = 0usize;
        loop {
            if self.stopping() {
                return None;
            }
            match self.connect_once(&mut next, first).await {
                Ok(pair) => return Some(pair),
                Err(e) => {
                    self.counters.set_error(e);
                    if self.pause(backoff.fail()).await {
                        return None;
                    }
                }
            }
        }
    }

    /// One attempt, on the broker after the one tried last (`next` counts the attempts).
    pub(crate) async fn connect_once(
        &mut self,
        next: &mut usize,
        first: &mut bool,
    ) -> Result<(Connection, Channel), String> {
        let uri = self.brokers[*next % self.brokers.len()].clone();
        *next += 1;
        match self.try_connect(&uri).await {
            Ok(pair) => {
                if !*first {
                    Counters::add(&self.counters.reconnects, 1);
                }
                *first = false;
                self.counters.connected.store(true, Relaxed);
                tracing::info!(broker = %redact(&uri), local = %self.config.local, "bridge: connected");
                Ok(pair)
            }
            Err(e) => Err(format!("cannot connect to {}: {e}", redact(&uri))),
        }
    }

    /// The link's channel is set up and carrying messages: the `connected` gauge rises.
    pub(crate) fn up(&self) {
        self.counters.connected.store(true, Relaxed);
    }

    async fn try_connect(&self, uri: &str) -> Result<(Connection, Channel), lapin::Error> {
        let props = ConnectionProperties::default()
            .with_connection_name(format!("postbox-bridge {}", self.config.local).into());
        let conn = within(SETUP, Connection::connect(uri, props)).await?;
        match within(SETUP, self.declare(&conn)).await {
            Ok(channel) => Ok((conn, channel)),
            Err(e) => {
                let _ = conn.close(200, "postbox bridge".into()).await;
                Err(e)
            }
        }
    }

    async fn declare(&self, conn: &Connection) -> Result<Channel, lapin::Error> {
        let channel = conn.create_channel().await?;
        if self.config.declare
            && let Some(q) = &self.config.queue
        {
            let mut args = FieldTable::default();
            args.insert(
                "x-queue-type".into(),
                AMQPValue::LongString(LongString::from("quorum")),
            );
            if let Some(n) = self.config.delivery_limit {
                args.insert("x-delivery-limit".into(), AMQPValue::LongLongInt(n.into()));
            }
            if let Some(x) = &self.config.dead_letter_exchange {
                args.insert(
                    "x-dead-letter-exchange".into(),
                    AMQPValue::LongString(x.as_str().into()),
                );
            }
            channel
                .queue_declare(
                    q.as_str().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..QueueDeclareOptions::default()
                    },
                    args,
                )
                .await?;
        }
        Ok(channel)
    }

    /// The connection is gone: counted and reported, the gauge lowered.
    pub(crate) fn lost(&self, why: &str) {
        self.counters.connected.store(false, Relaxed);
        self.counters.set_error(why.to_owned());
    }
}

/// A URI with its password hidden, for logs and statistics.
pub(crate) fn redact(uri: &str) -> String {
    match (uri.find("://"), uri.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &uri[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &uri[..s + 3], &creds[..c], &uri[at..]),
                None => uri.to_owned(),
            }
        }
        _ => uri.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            super::redact("amqp://guest:secret@host:5672/%2f"),
            "amqp://guest:***@host:5672/%2f"
        );
        assert_eq!(super::redact("amqp://host"), "amqp://host");
    }
}
