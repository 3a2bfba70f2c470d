//! `Store.bridge`: a store-and-forward bridge between the store's queues and RabbitMQ quorum
//! queues, run from a Python application, over the same bridge the `postbox bridge` command
//! runs.

use std::time::{Duration, Instant};

use postbox::Store;
use postbox::sync::Mutex;
#[cfg(feature = "bridge")]
use postbox_bridge::{Bridge, BridgeConfig, BridgeStats, LinkStats};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert;
use crate::errors::is_forked;
use crate::live::Live;
use crate::wait::wait_interruptible;
#[cfg(not(feature = "bridge"))]
use not_built::{Bridge, BridgeStats, LinkStats};

/// The bridge of a module built without the `bridge` feature: there is none, so no `Bridge`
/// object is ever made (the class stays, for annotations and the stubs).
#[cfg(not(feature = "bridge"))]
mod not_built {
    pub enum Bridge {}

    impl Bridge {
        pub fn stats(&self) -> BridgeStats {
            match *self {}
        }

        pub fn stop(self) -> BridgeStats {
            match self {}
        }
    }

    // As the real bridge, which stops its links on drop.
    impl Drop for Bridge {
        fn drop(&mut self) {
            match *self {}
        }
    }

    #[derive(Clone)]
    pub enum Never {}

    /// A link's statistics: there is no link.
    #[derive(Clone)]
    pub struct LinkStats {
        pub connected: bool,
        pub never: Never,
    }

    /// A bridge's statistics: never more than none.
    #[derive(Clone, Default)]
    pub struct BridgeStats {
        pub links: Vec<LinkStats>,
    }

    impl BridgeStats {
        pub fn forwarded(&self) -> u64 {
            0
        }

        pub fn connected(&self) -> bool {
            false
        }

        pub fn status_line(&self) -> String {
            String::new()
        }

        pub fn prometheus(&self) -> String {
            String::new()
        }
    }
}

/// How often `wait_connected` looks at the links.
const POLL: Duration = Duration::from_millis(20);

/// A running bridge (from ``Store.bridge``): links that carry messages between local queues
/// and broker queues on threads of their own. ``stop()`` it, or use it as a context manager;
/// the store stays open either way.
///
/// In a forked child the bridge's threads do not exist: every call raises ``ForkedError``, and
/// garbage collection only lets go of the handle.
#[pyclass(frozen, module = "postbox._postbox", name = "Bridge")]
pub struct PyBridge {
    /// `None` once stopped.
    bridge: Mutex<Option<Bridge>>,
    /// The statistics `stop()` returned, kept for later calls.
    last: Mutex<Option<BridgeStats>>,
    /// The process that started the bridge's threads.
    opened_by: u32,
}

impl Live for PyBridge {
    type Inner = Mutex<Option<Bridge>>;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &Mutex<Option<Bridge>> {
        &self.bridge
    }
}

impl Drop for PyBridge {
    fn drop(&mut self) {
        if let Some(b) = self.bridge.get_mut().take() {
            if is_forked(self.opened_by) {
                // Stopping would wait for threads that are not in this process.
                std::mem::forget(b);
            } else {
                // Stopping waits for the links (never with the GIL held: nothing there needs
                // it, but other Python threads should run meanwhile).
                Python::attach(|py| py.detach(move || drop(b)));
            }
        }
    }
}

/// Starts a bridge on `store` from TOML text (called by `PyStore::bridge`).
#[cfg(feature = "bridge")]
pub fn start(py: Python<'_>, store: &Store, config: &str) -> PyResult<PyBridge> {
    use crate::errors::IntoPy;
    let mut config = BridgeConfig::from_toml(config).py_err()?;
    config.store = None;
    config.bind = None;
    let bridge = py.detach(|| Bridge::start(store, config)).py_err()?;
    Ok(PyBridge {
        bridge: Mutex::new(Some(bridge)),
        last: Mutex::new(None),
        opened_by: postbox::binding::process_id(),
    })
}

/// Refuses: this module was built without the `bridge` feature.
#[cfg(not(feature = "bridge"))]
pub fn start(_py: Python<'_>, _store: &Store, _config: &str) -> PyResult<PyBridge> {
    Err(crate::errors::not_built(
        "the RabbitMQ bridge (Store.bridge)",
        "bridge",
    ))
}

#[cfg(not(feature = "bridge"))]
fn link_dict<'py>(_py: Python<'py>, l: &LinkStats) -> PyResult<Bound<'py, PyDict>> {
    match l.never {}
}

/// One link's statistics as a dict.
#[cfg(feature = "bridge")]
fn link_dict<'py>(py: Python<'py>, l: &LinkStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("direction", l.direction.as_str())?;
    d.set_item("local", &l.local)?;
    d.set_item("remote", &l.remote)?;
    d.set_item("connected", l.connected)?;
    d.set_item("forwarded", l.forwarded)?;
    d.set_item("in_flight", l.in_flight)?;
    d.set_item("reconnects", l.reconnects)?;
    d.set_item("republished", l.republished)?;
    d.set_item("nacked", l.nacked)?;
    d.set_item("dead_lettered", l.dead_lettered)?;
    d.set_item("rejected", l.rejected)?;
    d.set_item("local_retries", l.local_retries)?;
    d.set_item("last_error", l.last_error.as_deref())?;
    Ok(d)
}

fn stats_list<'py>(py: Python<'py>, s: &BridgeStats) -> PyResult<Vec<Bound<'py, PyDict>>> {
    s.links.iter().map(|l| link_dict(py, l)).collect()
}

impl PyBridge {
    /// The statistics now, or the final ones once stopped.
    fn current(&self) -> PyResult<BridgeStats> {
        let bridge = self.live()?;
        if let Some(b) = &*bridge.lock() {
            return Ok(b.stats());
        }
        Ok(self.last.lock().clone().unwrap_or_default())
    }

    fn stop_inner(&self, py: Python<'_>) -> PyResult<BridgeStats> {
        self.live()?;
        let bridge = self.bridge.lock().take();
        if let Some(b) = bridge {
            let stats = py.detach(move || b.stop());
            *self.last.lock() = Some(stats);
        }
        Ok(self.last.lock().clone().unwrap_or_default())
    }
}

#[pymethods]
impl PyBridge {
    /// Each link's statistics, in configuration order: a dict with ``direction``
    /// (``"outgoing"`` or ``"incoming"``), ``local`` (the local queue), ``remote`` (the broker
    /// queue, or ``"exchange/routing-key"``), ``connected``, ``forwarded``, ``in_flight``,
    /// ``reconnects``, ``republished``, ``nacked``, ``dead_lettered``, ``rejected``,
    /// ``local_retries`` and ``last_error`` (``None`` or the last failure's text). After
    /// ``stop()``, the final statistics.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        stats_list(py, &self.current()?)
    }

    /// Messages carried end to end by every link together.
    #[getter]
    fn forwarded(&self) -> PyResult<u64> {
        Ok(self.current()?.forwarded())
    }

    /// Whether every link is connected now (``False`` once stopped).
    #[getter]
    fn connected(&self) -> PyResult<bool> {
        self.live()?;
        Ok(self
            .bridge
            .lock()
            .as_ref()
            .is_some_and(|b| b.stats().connected()))
    }

    /// One line for a terminal or a log: per link, its direction, counts and state (``up`` or
    /// ``DOWN``), links separated by ``" | "``.
    fn status_line(&self) -> PyResult<String> {
        Ok(self.current()?.status_line())
    }

    /// The counters in Prometheus' text format (``postbox_bridge_forwarded_total``, ...), with
    /// labels ``direction``, ``local`` and ``remote``.
    fn metrics(&self) -> PyResult<String> {
        Ok(self.current()?.prometheus())
    }

    /// Waits until every link is connected, at most `timeout` (seconds or a ``timedelta``),
    /// with the GIL released; ``True`` if they all are, ``False`` if the time ran out or the
    /// bridge was stopped.
    fn wait_connected(&self, py: Python<'_>, timeout: &Bound<'_, PyAny>) -> PyResult<bool> {
        let bridge = self.live()?;
        let deadline = Instant::now().checked_add(convert::duration(timeout, "timeout")?);
        let got = wait_interruptible(py, deadline, |slice| {
            let until = Instant::now().checked_add(slice);
            loop {
                match bridge.lock().as_ref().map(|b| b.stats().connected()) {
                    Some(true) => return Ok(Some(true)),
                    None => return Ok(Some(false)),
                    Some(false) => {}
                }
                let now = Instant::now();
                // A Ctrl-C on the main thread interrupts the wait, checked at each poll.
                if until.is_some_and(|u| now >= u) || postbox::binding::interrupted() {
                    return Ok(None);
                }
                std::thread::sleep(until.map_or(POLL, |u| POLL.min(u - now)));
            }
        })?;
        Ok(got.unwrap_or(false))
    }

    /// Stops every link, with the GIL released, and returns the final statistics (as
    /// ``stats()``). Outgoing links wait up to five seconds for the broker's confirms already
    /// due and give every other message back to its local queue without counting a delivery;
    /// incoming links finish the batch being stored. Calling it again returns the same
    /// statistics.
    fn stop<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let stats = self.stop_inner(py)?;
        stats_list(py, &stats)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.stop_inner(py).map(drop)
    }

    fn __repr__(&self) -> String {
        if is_forked(self.opened_by) {
            return "<postbox.Bridge (forked)>".to_owned();
        }
        let running = self.bridge.lock().as_ref().map(Bridge::stats);
        let (stats, state) = match running {
            Some(s) => (s, "running"),
            None => (self.last.lock().clone().unwrap_or_default(), "stopped"),
        };
        let connected = stats.links.iter().filter(|l| l.connected).count();
        format!(
            "<postbox.Bridge {state} links={} connected={connected} forwarded={}>",
            stats.links.len(),
            stats.forwarded()
        )
    }
}
