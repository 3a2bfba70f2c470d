//! What a bridge is told to do: brokers, links and retry bounds, from TOML or built in code.

use std::path::{Path, PathBuf};
use std::time::Duration;

use postbox::{Error, Result};
use serde::Deserialize;

/// Which way a link carries messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// From a local postbox queue to the broker.
    Outgoing,
    /// From a broker queue into a local postbox queue.
    Incoming,
}

impl Direction {
    /// `"outgoing"` or `"incoming"`, as in the configuration file and the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Outgoing => "outgoing",
            Direction::Incoming => "incoming",
        }
    }
}

/// One local queue joined to one broker queue (or, outgoing, to an exchange and routing key).
///
/// Build one with [`LinkConfig::outgoing`], [`LinkConfig::outgoing_to_exchange`] or
/// [`LinkConfig::incoming`], or read it from a `[[link]]` table of the configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Which way the link carries messages.
    pub direction: Direction,
    /// The local postbox queue (created with default options when missing).
    pub local: String,
    /// The broker queue: published to through the default exchange (outgoing, unless
    /// `exchange` is set), or consumed from (incoming).
    #[serde(default)]
    pub queue: Option<String>,
    /// Outgoing only: publish to this exchange instead of the default one.
    #[serde(default)]
    pub exchange: Option<String>,
    /// Outgoing only: the routing key (default: `queue`, or empty).
    #[serde(default)]
    pub routing_key: Option<String>,
    /// Declare `queue` as a durable quorum queue at each connection (default true). An existing
    /// queue declared with other arguments makes the broker refuse the link, which then
    /// retries and reports the broker's reason in `last_error`.
    #[serde(default = "yes")]
    pub declare: bool,
    /// Outgoing: publishes awaiting the broker's confirm at most (default 1,000).
    #[serde(default = "default_in_flight")]
    pub in_flight: u32,
    /// Incoming: deliveries the broker may send before they are acknowledged (basic.qos,
    /// default 1,000).
    #[serde(default = "default_prefetch")]
    pub prefetch: u16,
    /// Messages taken from the local queue, or committed to it, per step (default 256).
    #[serde(default = "default_batch")]
    pub batch: u32,
    /// When declaring: the quorum queue's `x-delivery-limit`.
    #[serde(default)]
    pub delivery_limit: Option<u32>,
    /// When declaring: the quorum queue's `x-dead-letter-exchange`.
    #[serde(default)]
    pub dead_letter_exchange: Option<String>,
}

fn yes() -> bool {
    true
}
fn default_in_flight() -> u32 {
    1000
}
fn default_prefetch() -> u16 {
    1000
}
fn default_batch() -> u32 {
    256
}

impl LinkConfig {
    fn new(direction: Direction, local: &str, queue: &str) -> LinkConfig {
        LinkConfig {
            direction,
            local: local.to_owned(),
            queue: Some(queue.to_owned()),
            exchange: None,
            routing_key: None,
            declare: true,
            in_flight: default_in_flight(),
            prefetch: default_prefetch(),
            batch: default_batch(),
            delivery_limit: None,
            dead_letter_exchange: None,
        }
    }

    /// Forwards local queue `local` to broker queue `queue` (declared as a quorum queue).
    pub fn outgoing(local: &str, queue: &str) -> LinkConfig {
        LinkConfig::new(Direction::Outgoing, local, queue)
    }

    /// Forwards local queue `local` to `exchange` with `routing_key`; nothing is declared.
    pub fn outgoing_to_exchange(local: &str, exchange: &str, routing_key: &str) -> LinkConfig {
        LinkConfig {
            queue: None,
            exchange: Some(exchange.to_owned()),
            routing_key: Some(routing_key.to_owned()),
            declare: false,
            ..LinkConfig::new(Direction::Outgoing, local, "")
        }
    }

    /// Consumes broker queue `queue` (declared as a quorum queue) into local queue `local`.
    pub fn incoming(queue: &str, local: &str) -> LinkConfig {
        LinkConfig::new(Direction::Incoming, local, queue)
    }

    /// Sets [`in_flight`](Self::in_flight).
    pub fn in_flight(mut self, n: u32) -> Self {
        self.in_flight = n;
        self
    }

    /// Sets [`prefetch`](Self::prefetch).
    pub fn prefetch(mut self, n: u16) -> Self {
        self.prefetch = n;
        self
    }

    /// Sets [`batch`](Self::batch).
    pub fn batch(mut self, n: u32) -> Self {
        self.batch = n;
        self
    }

    /// Sets [`declare`](Self::declare).
    pub fn declare(mut self, on: bool) -> Self {
        self.declare = on;
        self
    }

    /// Sets [`delivery_limit`](Self::delivery_limit).
    pub fn delivery_limit(mut self, n: u32) -> Self {
        self.delivery_limit = Some(n);
        self
    }

    /// Sets [`dead_letter_exchange`](Self::dead_letter_exchange).
    pub fn dead_letter_exchange(mut self, exchange: &str) -> Self {
        self.dead_letter_exchange = Some(exchange.to_owned());
        self
    }

    /// The exchange published to (`""`, the default exchange, unless set).
    pub(crate) fn exchange_name(&self) -> &str {
        self.exchange.as_deref().unwrap_or("")
    }

    /// The routing key published with.
    pub(crate) fn routing_key_name(&self) -> &str {
        self.routing_key
            .as_deref()
            .or(self.queue.as_deref())
            .unwrap_or("")
    }

    /// What the link's remote end is called in statistics: the queue, or `exchange/key`.
    pub fn remote_name(&self) -> String {
        match (&self.exchange, &self.queue) {
            (Some(x), _) => format!("{x}/{}", self.routing_key_name()),
            (None, Some(q)) => q.clone(),
            (None, None) => String::new(),
        }
    }

    fn check(&self, i: usize) -> Result<()> {
        let bad = |why: &str| Err(Error::Config(format!("link {}: {why}", i + 1)));
        if self.local.is_empty() {
            return bad("`local` (the postbox queue) is empty");
        }
        let queue = self.queue.as_deref().unwrap_or("");
        match self.direction {
            Direction::Outgoing => {
                if queue.is_empty() && self.exchange.is_none() {
                    return bad("an outgoing link needs `queue` or `exchange`");
                }
                if self.in_flight == 0 || self.in_flight > 65_535 {
                    return bad("`in_flight` must be 1 to 65,535");
                }
            }
            Direction::Incoming => {
                if queue.is_empty() {
                    return bad("an incoming link needs `queue`");
                }
                if self.exchange.is_some() || self.routing_key.is_some() {
                    return bad("`exchange` and `routing_key` are for outgoing links");
                }
                if self.prefetch == 0 {
                    return bad("`prefetch` must be 1 to 65,535");
                }
            }
        }
        if self.declare && queue.is_empty() {
            return bad("`declare` needs `queue`");
        }
        if queue.len() > 255 || self.routing_key_name().len() > 255 {
            return bad("AMQP names are at most 255 bytes");
        }
        if self.batch == 0 || self.batch > 4096 {
            return bad("`batch` must be 1 to 4,096");
        }
        Ok(())
    }
}

/// How failures are retried: truncated exponential backoff, and when a message is poison.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// First wait after a failure, in milliseconds (default 100).
    #[serde(default = "default_initial_ms")]
    pub initial_ms: u64,
    /// Longest wait, in milliseconds: the doubling stops here (default 10,000).
    #[serde(default = "default_max_ms")]
    pub max_ms: u64,
    /// Outgoing: a message that made the broker close the channel this many times, each time
    /// alone in flight, is dead-lettered locally with the broker's reason (default 3).
    #[serde(default = "default_poison_after")]
    pub poison_after: u32,
    /// Outgoing: a publish not confirmed within this many milliseconds counts as a lost
    /// channel, and the link reconnects and publishes again (default 15,000). A channel left
    /// talking to a quorum queue leader that died may otherwise wait for good.
    #[serde(default = "default_confirm_timeout_ms")]
    pub confirm_timeout_ms: u64,
}

fn default_initial_ms() -> u64 {
    100
}
fn default_max_ms() -> u64 {
    10_000
}
fn default_poison_after() -> u32 {
    3
}
fn default_confirm_timeout_ms() -> u64 {
    15_000
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            initial_ms: default_initial_ms(),
            max_ms: default_max_ms(),
            poison_after: default_poison_after(),
            confirm_timeout_ms: default_confirm_timeout_ms(),
        }
    }
}

impl RetryConfig {
    pub(crate) fn initial(&self) -> Duration {
        Duration::from_millis(self.initial_ms.max(1))
    }
    pub(crate) fn confirm_timeout(&self) -> Duration {
        Duration::from_millis(self.confirm_timeout_ms.max(1))
    }
    pub(crate) fn max(&self) -> Duration {
        Duration::from_millis(self.max_ms.max(self.initial_ms).max(1))
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    store: Option<PathBuf>,
    #[serde(default)]
    bind: Option<String>,
    broker: OneOrMany,
    #[serde(default)]
    retry: RetryConfig,
    #[serde(default)]
    link: Vec<LinkConfig>,
}

/// A whole bridge: the brokers to try, in order, and the links to run.
///
/// ```toml
/// store = "app.postbox"                      # for `postbox bridge` only
/// bind = "127.0.0.1:9187"                    # optional: the dashboard and /metrics
/// broker = ["amqp://guest:guest@10.0.0.5:5672/%2f", "amqp://guest:guest@10.0.0.6:5672/%2f"]
///
/// [retry]
/// initial_ms = 100
/// max_ms = 10000
///
/// [[link]]
/// direction = "outgoing"
/// local = "orders-out"
/// queue = "orders"
/// in_flight = 1000
///
/// [[link]]
/// direction = "incoming"
/// queue = "invoices"
/// local = "invoices-in"
/// prefetch = 500
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeConfig {
    /// The store file, read by `postbox bridge` (a bridge started in code is given its store).
    pub store: Option<PathBuf>,
    /// Where `postbox bridge` serves its dashboard and `/metrics` (none unless set).
    pub bind: Option<String>,
    /// AMQP URIs (`amqp://user:password@host:port/vhost`), tried in turn after a failure.
    pub brokers: Vec<String>,
    /// Backoff and poison bounds.
    pub retry: RetryConfig,
    /// The links, each run on a connection of its own.
    pub links: Vec<LinkConfig>,
}

impl BridgeConfig {
    /// A bridge to one broker with no links yet.
    pub fn new(broker: &str) -> BridgeConfig {
        BridgeConfig {
            store: None,
            bind: None,
            brokers: vec![broker.to_owned()],
            retry: RetryConfig::default(),
            links: Vec::new(),
        }
    }

    /// Adds a broker to fail over to.
    pub fn broker(mut self, uri: &str) -> Self {
        self.brokers.push(uri.to_owned());
        self
    }

    /// Adds a link.
    pub fn link(mut self, link: LinkConfig) -> Self {
        self.links.push(link);
        self
    }

    /// Sets the retry bounds.
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// Reads a configuration from TOML text (the format shown above).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming what is wrong: a TOML error, an unknown key, a link that
    /// cannot work, a broker URI that does not parse.
    pub fn from_toml(text: &str) -> Result<BridgeConfig> {
        let f: File = toml::from_str(text).map_err(|e| Error::Config(e.to_string()))?;
        let brokers = match f.broker {
            OneOrMany::One(b) => vec![b],
            OneOrMany::Many(b) => b,
        };
        let c = BridgeConfig {
            store: f.store,
            bind: f.bind,
            brokers,
            retry: f.retry,
            links: f.link,
        };
        c.check()?;
        Ok(c)
    }

    /// Reads a configuration file; a relative `store` is taken from the file's directory.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the file cannot be read; otherwise as [`BridgeConfig::from_toml`].
    pub fn from_file(path: &Path) -> Result<BridgeConfig> {
        let text = std::fs::read_to_string(path)?;
        let mut c = BridgeConfig::from_toml(&text)?;
        if let Some(s) = &c.store
            && s.is_relative()
            && let Some(dir) = path.parent()
        {
            c.store = Some(dir.join(s));
        }
        Ok(c)
    }

    /// Checks that every link can work and every broker URI parses.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the first problem.
    pub fn check(&self) -> Result<()> {
        if self.brokers.is_empty() {
            return Err(Error::Config("no broker URI".into()));
        }
        for b in &self.brokers {
            b.parse::<lapin::uri::AMQPUri>()
                .map_err(|e| Error::Config(format!("broker URI {b:?}: {e}")))?;
        }
        if self.links.is_empty() {
            return Err(Error::Config("no [[link]]".into()));
        }
        for (i, l) in self.links.iter().enumerate() {
            l.check(i)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_with_both_directions_reads_back() {
        let c = BridgeConfig::from_toml(
            r#"
            broker = "amqp://guest:guest@127.0.0.1:5672/%2f"
            [[link]]
            direction = "outgoing"
            local = "out"
            queue = "orders"
            in_flight = 10
            [[link]]
            direction = "incoming"
            queue = "replies"
            local = "in"
            "#,
        )
        .unwrap();
        assert_eq!(c.brokers.len(), 1);
        assert_eq!(
            c.links[0],
            LinkConfig::outgoing("out", "orders").in_flight(10)
        );
        assert_eq!(c.links[1], LinkConfig::incoming("replies", "in"));
    }

    #[test]
    fn mistakes_are_config_errors_that_say_what() {
        for (text, says) in [
            ("broker = 'amqp://x'\n", "no [[link]]"),
            (
                "broker = 'nope://x'\n[[link]]\ndirection='incoming'\nlocal='a'\nqueue='b'",
                "broker URI",
            ),
            (
                "broker = 'amqp://x'\n[[link]]\ndirection='incoming'\nlocal='a'",
                "needs `queue`",
            ),
            (
                "broker = 'amqp://x'\n[[link]]\ndirection='sideways'\nlocal='a'",
                "unknown variant",
            ),
            ("broker = 'amqp://x'\nlinks = 1", "unknown field"),
            (
                "broker = 'amqp://x'\n[[link]]\ndirection='outgoing'\nlocal='a'\nqueue='q'\nin_flight=0",
                "in_flight",
            ),
        ] {
            let e = BridgeConfig::from_toml(text).unwrap_err();
            assert_eq!(e.kind(), postbox::ErrorKind::Config, "{text}");
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }
}
