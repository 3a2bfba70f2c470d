//! `postbox_bridge_start`: a store-and-forward bridge between this store's queues and
//! RabbitMQ quorum queues, run from inside a C application, over the same bridge the
//! `postbox bridge` command runs.
//!
//! The bridge (its AMQP client and async runtime) is the `bridge` feature. Without it the
//! exports stay, so the header and the link are the same for every build, and
//! `postbox_bridge_start` answers `POSTBOX_UNSUPPORTED` saying how to build it in; no handle is
//! ever made then (`Running` is uninhabited).

use std::ffi::{CString, c_char, c_int};

use crate::StoreTag;
use crate::guard::{Failure, Out, Outcome, VersionedOut, arg_ref, arg_str, guard, take_box};
use crate::handle::Handle;
use crate::status::POSTBOX_OK;
use crate::store::postbox_store;

#[cfg(feature = "bridge")]
mod running {
    use ::postbox_bridge::{Bridge, BridgeConfig, BridgeStats, LinkStats};

    use super::{BRIDGE_STATS_V1, postbox_bridge_stats};
    use crate::guard::Outcome;

    /// A running bridge.
    pub(super) struct Running(Bridge);

    impl Running {
        /// Starts a bridge on `store` from the text of a configuration.
        pub(super) fn start(store: &postbox::Store, toml: &str) -> Outcome<Running> {
            let mut config = BridgeConfig::from_toml(toml)?;
            config.store = None;
            config.bind = None;
            Ok(Running(Bridge::start(store, config)?))
        }

        /// Totals over the links.
        pub(super) fn totals(&self) -> postbox_bridge_stats {
            let stats = self.0.stats();
            let sum = |get: fn(&LinkStats) -> u64| stats.links.iter().map(get).sum();
            postbox_bridge_stats {
                struct_size: BRIDGE_STATS_V1 as u32,
                reserved: 0,
                links: stats.links.len() as u64,
                links_connected: stats.links.iter().filter(|l| l.connected).count() as u64,
                forwarded: sum(|l| l.forwarded),
                in_flight: sum(|l| l.in_flight),
                reconnects: sum(|l| l.reconnects),
                republished: sum(|l| l.republished),
                nacked: sum(|l| l.nacked),
                dead_lettered: sum(|l| l.dead_lettered),
                rejected: sum(|l| l.rejected),
                local_retries: sum(|l| l.local_retries),
            }
        }

        /// The counters in Prometheus' text format.
        pub(super) fn metrics(&self) -> String {
            BridgeStats::prometheus(&self.0.stats())
        }

        /// One line for a terminal or a log.
        pub(super) fn status_line(&self) -> String {
            BridgeStats::status_line(&self.0.stats())
        }

        /// Stops every link and waits for them (bounded).
        pub(super) fn stop(self) {
            self.0.stop();
        }
    }
}

#[cfg(not(feature = "bridge"))]
mod running {
    use super::postbox_bridge_stats;
    use crate::guard::{Failure, Outcome};

    /// A bridge of a library built without the `bridge` feature: there is none.
    pub(super) enum Running {}

    impl Running {
        /// Refuses: this library was built without the `bridge` feature.
        pub(super) fn start(_store: &postbox::Store, _toml: &str) -> Outcome<Running> {
            Err(Failure::not_built(
                "the RabbitMQ bridge (postbox_bridge_start)",
                "bridge",
            ))
        }

        pub(super) fn totals(&self) -> postbox_bridge_stats {
            match *self {}
        }

        pub(super) fn metrics(&self) -> String {
            match *self {}
        }

        pub(super) fn status_line(&self) -> String {
            match *self {}
        }

        pub(super) fn stop(self) {
            match self {}
        }
    }
}

use running::Running;

/// A running bridge, from `postbox_bridge_start`. Stop and free it with `postbox_bridge_stop`
/// (before closing its store). Its accessors are thread-safe.
pub struct postbox_bridge {
    bridge: Running,
    tag: StoreTag,
}

impl Handle for postbox_bridge {
    const ARG: &'static str = "bridge";

    fn tag(&self) -> StoreTag {
        self.tag
    }
}

/// The totals over every link of a bridge, filled by `postbox_bridge_stats_get`.
///
/// Versioned: the caller sets `struct_size` to `sizeof(postbox_bridge_stats)` (or calls
/// `postbox_bridge_stats_init`) before the call. Later versions of the library append fields
/// and keep accepting the shorter struct: a caller built against an older header gets only the
/// fields its `struct_size` covers, and nothing past them is written.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct postbox_bridge_stats {
    /// `sizeof(postbox_bridge_stats)`, set by the caller; written back unchanged.
    pub struct_size: u32,
    /// Reserved (keeps the counters 8-byte aligned without padding); written as 0.
    pub reserved: u32,
    /// Links of the bridge (the `[[link]]` tables of its configuration).
    pub links: u64,
    /// Links whose connection and channel are up now.
    pub links_connected: u64,
    /// Messages carried end to end: confirmed by the broker and completed locally (outgoing),
    /// or committed locally and acknowledged to the broker (incoming).
    pub forwarded: u64,
    /// Messages taken and not yet settled on both sides.
    pub in_flight: u64,
    /// Connections made after each link's first (after a drop or a refusal).
    pub reconnects: u64,
    /// Publishes sent again after a drop or a negative confirm (each may be a duplicate at the
    /// broker, with the same AMQP `message-id`).
    pub republished: u64,
    /// Negative publisher confirms.
    pub nacked: u64,
    /// Messages moved to the local dead-letter queue with the broker's reason.
    pub dead_lettered: u64,
    /// Deliveries rejected to the broker's dead-letter policy because the local queue refused
    /// them for good.
    pub rejected: u64,
    /// Local operations retried after a transient failure.
    pub local_retries: u64,
}

/// The first version of `postbox_bridge_stats`: the smallest `struct_size` accepted.
const BRIDGE_STATS_V1: usize = size_of::<postbox_bridge_stats>();

// `VersionedOut` copies an older caller's prefix of the struct: it holds no padding.
const _: () = assert!(BRIDGE_STATS_V1 == 8 + 10 * 8);

/// A copy of `text` for C, freed with `postbox_string_free`.
fn owned_string(text: String) -> Outcome<*mut c_char> {
    CString::new(text)
        .map(CString::into_raw)
        .map_err(|_| Failure::invalid("a NUL byte in the text"))
}

/// Starts a bridge on `store` from `config_toml`, the text of a bridge configuration (the
/// format of the `postbox bridge --config` file: `broker`, `[retry]`, `[[link]]` tables; its
/// `store` and `bind` keys are ignored here). Each link carries messages between a local queue
/// of `store` (created with default options when missing) and a broker queue, on threads of
/// the bridge's own, until `postbox_bridge_stop`. The broker need not be up: links connect,
/// and keep reconnecting, in the background, and messages wait in the local queues meanwhile
/// (`postbox_bridge_stats_get` shows which links are connected).
///
/// `config_toml` is copied; the caller keeps it. On success `*bridge_out` receives a handle
/// the caller owns and frees with `postbox_bridge_stop`, before closing `store`.
///
/// The bridge is an optional part of libpostbox, the `bridge` feature (README, "Features and
/// defaults"): a library built without it answers `POSTBOX_UNSUPPORTED`, and
/// `postbox_last_error_message` gives the build command that adds it
/// (`cargo cbuild --features bridge`); `postbox bridge --config FILE` runs the same bridge
/// beside a multi-process store without it.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_CONFIG` for a configuration that does not parse or cannot work (a
/// TOML error, an unknown key, no broker or link, a broker URI that does not parse; the
/// reason is in `postbox_last_error_message`); `POSTBOX_INVALID_ARGUMENT` (NULL `store`,
/// `config_toml` or `bridge_out`; invalid UTF-8; an invalid local queue name); `POSTBOX_IO`
/// when the bridge's threads cannot start; `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors
/// (opening a local queue); `POSTBOX_UNSUPPORTED` when the library was built without the
/// `bridge` feature.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_bridge_start(
    store: *const postbox_store,
    config_toml: *const c_char,
    bridge_out: *mut *mut postbox_bridge,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let text = arg_str(config_toml, "config_toml")?;
        let out = Out::required(bridge_out, "bridge_out")?;
        store.live()?;
        let bridge = Running::start(&store.store, text)?;
        out.write(Box::into_raw(Box::new(postbox_bridge {
            bridge,
            tag: store.tag,
        })));
        Ok(POSTBOX_OK)
    })
}

/// Sets `stats->struct_size` to `sizeof(postbox_bridge_stats)` and every counter to 0.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `stats` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_bridge_stats_init(stats: *mut postbox_bridge_stats) -> c_int {
    guard(|| {
        Out::required(stats, "stats")?.write(postbox_bridge_stats {
            struct_size: BRIDGE_STATS_V1 as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

/// Reads the bridge's counters, totalled over its links, into `stats_out`, whose
/// `struct_size` the caller sets first (`sizeof(postbox_bridge_stats)`, or
/// `postbox_bridge_stats_init`). Per-link counters and the last error of each link are in
/// `postbox_bridge_metrics` and `postbox_bridge_status_line`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, bad `struct_size`); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_bridge_stats_get(
    bridge: *const postbox_bridge,
    stats_out: *mut postbox_bridge_stats,
) -> c_int {
    guard(|| {
        let bridge = arg_ref(bridge, "bridge")?;
        let out = VersionedOut::required(stats_out, BRIDGE_STATS_V1, "stats_out")?;
        bridge.live()?;
        out.write(bridge.bridge.totals());
        Ok(POSTBOX_OK)
    })
}

/// The bridge's counters in Prometheus' text format: `postbox_bridge_forwarded_total`,
/// `postbox_bridge_connected`, ... with labels `direction`, `local` and `remote`, one series
/// per link (what `postbox bridge --bind` adds to `/metrics`).
///
/// On success `*text_out` receives a NUL-terminated UTF-8 string the caller owns and frees with
/// `postbox_string_free` (not `free()`).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `bridge` or `text_out`); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_bridge_metrics(
    bridge: *const postbox_bridge,
    text_out: *mut *mut c_char,
) -> c_int {
    stats_text(bridge, text_out, Running::metrics)
}

/// One line for a terminal or a log: per link, its direction, counts and state (`"up"` or
/// `"DOWN"`), links separated by `" | "`.
///
/// On success `*text_out` receives a NUL-terminated UTF-8 string the caller owns and frees with
/// `postbox_string_free` (not `free()`).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `bridge` or `text_out`); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_bridge_status_line(
    bridge: *const postbox_bridge,
    text_out: *mut *mut c_char,
) -> c_int {
    stats_text(bridge, text_out, Running::status_line)
}

/// Hands out one rendering of the bridge's statistics as an owned string.
fn stats_text(
    bridge: *const postbox_bridge,
    text_out: *mut *mut c_char,
    render: fn(&Running) -> String,
) -> c_int {
    guard(|| {
        let bridge = arg_ref(bridge, "bridge")?;
        let out = Out::required(text_out, "text_out")?;
        bridge.live()?;
        out.write(owned_string(render(&bridge.bridge))?);
        Ok(POSTBOX_OK)
    })
}

/// Takes back a string made by `owned_string`.
///
/// The header states that such a string is freed once, with `postbox_string_free`; that is the
/// caller's half of the contract this relies on.
fn drop_string(text: *mut c_char) {
    if text.is_null() {
        return;
    }
    // SAFETY: non-NULL and, per the header, made by `CString::into_raw` in `owned_string` and
    // not yet freed.
    drop(unsafe { CString::from_raw(text) });
}

/// Frees a string postbox handed to the caller (`postbox_bridge_metrics`,
/// `postbox_bridge_status_line`). NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_string_free(text: *mut c_char) {
    guard(|| {
        drop_string(text);
        Ok(())
    })
}

/// Stops the bridge and frees `bridge`. Outgoing links stop taking local messages, wait up
/// to five seconds for the broker's confirms already due, complete what was confirmed and give
/// every other message back to its local queue without counting a delivery; incoming links
/// finish the batch being stored and acknowledge it. A link that is not connected stops at
/// once; the wait is bounded (a link still busy after 30 seconds is abandoned; its messages
/// stay in the local queue). The store stays open: stop every bridge of a store before closing it. `bridge` may be
/// NULL (no-op). Do not call it while another thread still uses `bridge`.
///
/// In a forked child (a handle inherited across `fork()`) it only lets go of the handle: the
/// bridge's threads belong to the parent.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_bridge_stop(bridge: *mut postbox_bridge) {
    guard(|| {
        if let Some(b) = take_box(bridge) {
            if b.tag.is_forked() {
                // Its runtime's threads do not exist in this process: stopping would wait for
                // them forever. The parent's bridge is not affected.
                std::mem::forget(b);
            } else {
                b.bridge.stop();
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::POSTBOX_INVALID_ARGUMENT;

    #[test]
    fn strings_round_trip_and_accept_null() {
        let p = owned_string("postbox_bridge_forwarded_total 1\n".into()).unwrap();
        // SAFETY: `p` is a NUL-terminated string made by `owned_string`.
        let text = unsafe { std::ffi::CStr::from_ptr(p) };
        assert_eq!(text.to_str().unwrap(), "postbox_bridge_forwarded_total 1\n");
        postbox_string_free(p);
        postbox_string_free(std::ptr::null_mut());
        assert!(owned_string("a\0b".into()).is_err());
    }

    #[test]
    fn bad_arguments_are_refused_before_any_work() {
        let mut out: *mut postbox_bridge = std::ptr::null_mut();
        let rc = postbox_bridge_start(std::ptr::null(), c"x".as_ptr(), &mut out);
        assert_eq!(rc, POSTBOX_INVALID_ARGUMENT);
        assert!(out.is_null());
        assert_eq!(
            postbox_bridge_stats_init(std::ptr::null_mut()),
            POSTBOX_INVALID_ARGUMENT
        );
        let mut st = postbox_bridge_stats::default();
        assert_eq!(postbox_bridge_stats_init(&mut st), POSTBOX_OK);
        assert_eq!(st.struct_size as usize, size_of::<postbox_bridge_stats>());
        postbox_bridge_stop(std::ptr::null_mut());
        // A configuration error is reported as such (the store is only read after it parses);
        // without the feature, the bridge is refused as not built, with the build command.
        let dir = std::env::temp_dir().join(format!("postbox-ffi-bridge-{}", std::process::id()));
        let path = CString::new(dir.join("s.postbox").to_str().unwrap()).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let mut store: *mut postbox_store = std::ptr::null_mut();
        assert_eq!(
            crate::store::postbox_store_open(path.as_ptr(), std::ptr::null(), &mut store),
            POSTBOX_OK
        );
        let rc = postbox_bridge_start(store, c"broker = 'amqp://x'\n".as_ptr(), &mut out);
        #[cfg(feature = "bridge")]
        assert_eq!(rc, crate::status::POSTBOX_CONFIG);
        #[cfg(not(feature = "bridge"))]
        {
            assert_eq!(rc, crate::status::POSTBOX_UNSUPPORTED);
            // SAFETY: the guard's message is a NUL-terminated string valid until the next call.
            let why = unsafe { std::ffi::CStr::from_ptr(crate::guard::last_error_ptr()) };
            assert!(
                why.to_str().unwrap().contains("--features bridge"),
                "{why:?}"
            );
        }
        assert!(out.is_null());
        assert_eq!(crate::store::postbox_store_close(store), POSTBOX_OK);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
