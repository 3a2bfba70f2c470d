//! Store-and-forward between postbox queues and RabbitMQ quorum queues.
//!
//! postbox stays the application's local, crash-safe outbox and inbox; a [`Bridge`] carries
//! messages between it and a broker, as MSMQ's outgoing queues did:
//!
//! - **Outgoing** links drain a local queue into a quorum queue (or an exchange), with
//!   publisher confirms, many in flight; each local message is completed only after the
//!   broker confirmed it, and is published with its `message_key` (else
//!   `postbox-<queue>-<id>`) as AMQP `message-id`, so a consumer can drop the copies a
//!   reconnect may produce.
//! - **Incoming** links consume a quorum queue into a local queue and acknowledge each
//!   delivery only after the local commit; `x-delivery-count` becomes the local delivery
//!   count ([`Message::prior_deliveries`](postbox::Message::prior_deliveries)).
//!
//! Messages of one `group` keep their order end to end. Dropped connections, broker restarts
//! and refused publishes are retried with truncated exponential backoff ([`RetryConfig`]),
//! over the brokers listed, in turn. A message the broker will never take goes to the local
//! dead-letter queue with reason `BrokerRefused` and the broker's words.
//!
//! ```no_run
//! use postbox_bridge::{Bridge, BridgeConfig, LinkConfig};
//! let store = postbox::Store::open("app.postbox")?;
//! let bridge = Bridge::start(
//!     &store,
//!     BridgeConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f")
//!         .link(LinkConfig::outgoing("orders-out", "orders"))
//!         .link(LinkConfig::incoming("invoices", "invoices-in")),
//! )?;
//! store.queue("orders-out")?.send("order 1")?; // on its way once the broker confirms
//! println!("{}", bridge.stats().status_line());
//! bridge.stop();
//! # Ok::<(), postbox::Error>(())
//! ```
//!
//! The `postbox bridge --config FILE` command runs a bridge from a TOML file
//! ([`BridgeConfig::from_toml`]); C and Python start one inside an application with
//! `postbox_bridge_start` and `Store.bridge`.

mod backoff;
mod config;
mod connect;
mod incoming;
mod mapping;
mod outgoing;
mod stats;

use std::sync::Arc;
use std::time::{Duration, Instant};

use postbox::{Error, Result, Store};
use tokio::sync::watch;

pub use config::{BridgeConfig, Direction, LinkConfig, RetryConfig};
pub use stats::{BridgeStats, LinkStats};

use crate::connect::Link;
use crate::stats::Counters;

/// A running bridge: one task per link on a small runtime of its own. Dropping it stops it
/// as [`Bridge::stop`] does.
pub struct Bridge {
    runtime: Option<tokio::runtime::Runtime>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    counters: Vec<Arc<Counters>>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("links", &self.counters.len())
            .finish_non_exhaustive()
    }
}

impl Bridge {
    /// Starts every link of `config` on `store`. Local queues are opened (created with
    /// default options when missing); the broker need not be up: links connect, and keep
    /// reconnecting, in the background, and messages wait in the local queues meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a configuration that cannot work; the store's errors opening a
    /// local queue (e.g. [`Error::Closed`]); [`Error::Io`] if the runtime's threads cannot
    /// start.
    pub fn start(store: &Store, config: BridgeConfig) -> Result<Bridge> {
        config.check()?;
        let mut links = Vec::new();
        for l in &config.links {
            links.push((l.clone(), store.queue(&l.local)?));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("postbox-bridge")
            .enable_all()
            .build()?;
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let mut counters = Vec::new();
        for (l, queue) in links {
            let c = Arc::new(Counters::new(&l));
            counters.push(c.clone());
            let link = Link {
                brokers: config.brokers.clone(),
                retry: config.retry.clone(),
                queue,
                counters: c,
                stop: stop_rx.clone(),
                config: l,
            };
            tasks.push(match link.config.direction {
                Direction::Outgoing => runtime.spawn(outgoing::run(link)),
                Direction::Incoming => runtime.spawn(incoming::run(link)),
            });
        }
        tracing::info!(links = tasks.len(), "bridge: started");
        Ok(Bridge {
            runtime: Some(runtime),
            stop,
            tasks,
            counters,
        })
    }

    /// What each link has done so far.
    pub fn stats(&self) -> BridgeStats {
        BridgeStats {
            links: self.counters.iter().map(|c| c.snapshot()).collect(),
        }
    }

    /// Waits until every link is connected; `false` if `timeout` passed first.
    pub fn wait_connected(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.stats().connected() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops every link and returns the final statistics. Outgoing links stop taking local
    /// messages, wait up to five seconds for the confirms already due, complete what was
    /// confirmed and give every other message back to its queue without counting a
    /// delivery; incoming links finish the batch being stored and acknowledge it. Safe to call
    /// from any thread, including an async runtime's.
    pub fn stop(mut self) -> BridgeStats {
        self.shut();
        self.stats()
    }

    fn shut(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        let _ = self.stop.send(true);
        let tasks = std::mem::take(&mut self.tasks);
        // block_on may not run inside another runtime's thread: a plain thread waits.
        let waiter = std::thread::spawn(move || {
            runtime.block_on(async {
                for t in tasks {
                    let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
                }
            });
            runtime.shutdown_timeout(Duration::from_secs(1));
        });
        let _ = waiter.join();
        tracing::info!("bridge: stopped");
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.shut();
    }
}

/// A configuration error, as the other entry points report it.
pub fn config_error(what: impl Into<String>) -> Error {
    Error::Config(what.into())
}
