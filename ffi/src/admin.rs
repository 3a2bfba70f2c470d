//! `postbox_store_serve_admin`: the admin endpoint (dashboard, `/metrics`, `postbox --admin`)
//! served from inside a C application, over the same server the Rust API starts.
//!
//! The endpoint is the `admin` feature (crate postbox-admin). Without it the exports stay, so
//! the header and the link are the same for every build, and `postbox_store_serve_admin`
//! answers `POSTBOX_UNSUPPORTED` saying how to build it in; no handle is ever made then.

use std::ffi::{CString, c_char, c_int};

#[cfg(feature = "admin")]
use ::postbox_admin::{AdminOptions, AdminServer, serve_admin};

use crate::guard::{Failure, Out, Outcome, arg_opt_str, arg_ref, arg_str, guard, take_box};
use crate::handle::Handle;
use crate::status::POSTBOX_OK;
use crate::store::postbox_store;

/// The endpoint of a library built without the `admin` feature: there is none, so no handle
/// ever holds one.
#[cfg(not(feature = "admin"))]
enum AdminServer {}

#[cfg(not(feature = "admin"))]
impl AdminServer {
    fn addr(&self) -> std::net::SocketAddr {
        match *self {}
    }

    fn stop(&self) {
        match *self {}
    }
}

/// Starts the endpoint (the `admin` feature).
#[cfg(feature = "admin")]
fn serve(
    store: &postbox::Store,
    addr: &str,
    allow_actions: bool,
    token: Option<&str>,
) -> Outcome<(AdminServer, String, String)> {
    let mut options = AdminOptions::read_only();
    options.allow_actions = allow_actions;
    options.token = token.map(str::to_owned);
    let server = serve_admin(store, addr, options)?;
    let (url, token) = (server.url(), server.token().to_owned());
    Ok((server, url, token))
}

/// Refuses: this library was built without the `admin` feature.
#[cfg(not(feature = "admin"))]
fn serve(
    _store: &postbox::Store,
    _addr: &str,
    _allow_actions: bool,
    _token: Option<&str>,
) -> Outcome<(AdminServer, String, String)> {
    Err(Failure::not_built(
        "the admin endpoint (postbox_store_serve_admin)",
        "admin",
    ))
}

/// A running admin endpoint, from `postbox_store_serve_admin`. Stop and free it with
/// `postbox_admin_stop` (before closing its store). Its accessors are thread-safe.
pub struct postbox_admin {
    server: AdminServer,
    url: CString,
    token: CString,
}

/// Starts the admin endpoint of `store` on `addr` (`"host:port"`, e.g. `"127.0.0.1:9090"`;
/// port 0 picks a free one, see `postbox_admin_url`): the live dashboard page, `/metrics` in
/// Prometheus text format, and the commands of `postbox --admin URL`, so that the `postbox`
/// command reaches a store this process holds in single-process mode. It serves from threads
/// of its own (a fixed number, whatever its callers do) until `postbox_admin_stop`.
///
/// Requests must name the endpoint in their `Host` header (its address, a loopback address
/// or `localhost`): a page that reaches it through DNS rebinding is refused. Counts (the
/// page, `/metrics`) are open; dead letters and every `postbox --admin` command need the
/// token in the `X-Postbox-Token` header (`postbox --admin URL --token TOKEN`): `token` (a
/// NUL-terminated string of printable ASCII without spaces), or a random one when `token`
/// is NULL; read it with `postbox_admin_token`. With `allow_actions` non-zero the page's
/// resubmit button and commands that change the store are allowed too (with the token);
/// with it zero they are refused.
///
/// On success `*admin_out` receives a handle the caller owns and frees with
/// `postbox_admin_stop`.
///
/// The endpoint is an optional part of libpostbox, the `admin` feature (README, "Features and
/// defaults"): a library built without it answers `POSTBOX_UNSUPPORTED`, and
/// `postbox_last_error_message` gives the build command that adds it
/// (`cargo cbuild --features admin`).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store`, `addr` or `admin_out`; an address
/// that does not parse; an empty token or one with spaces or control characters; invalid
/// UTF-8); `POSTBOX_IO` when it cannot listen there (address in use, no permission);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`; `POSTBOX_UNSUPPORTED` when the library was built
/// without the `admin` feature.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_store_serve_admin(
    store: *const postbox_store,
    addr: *const c_char,
    allow_actions: c_int,
    token: *const c_char,
    admin_out: *mut *mut postbox_admin,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let addr = arg_str(addr, "addr")?;
        let token = arg_opt_str(token, "token")?;
        let out = Out::required(admin_out, "admin_out")?;
        store.live()?;
        let (server, url, token) = serve(&store.store, addr, allow_actions != 0, token)?;
        let text = |s: String| {
            CString::new(s).map_err(|_| Failure::invalid("a NUL byte in the admin URL or token"))
        };
        let url = text(url)?;
        let token = text(token)?;
        out.write(Box::into_raw(Box::new(postbox_admin {
            server,
            url,
            token,
        })));
        Ok(POSTBOX_OK)
    })
}

/// The dashboard's URL, `"http://ADDR:PORT/"` (with the real port when 0 was asked for). The
/// string belongs to `admin` and lives until `postbox_admin_stop`; NULL if `admin` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_admin_url(admin: *const postbox_admin) -> *const c_char {
    guard(|| Ok(arg_ref(admin, "admin")?.url.as_ptr()))
}

/// The port the endpoint listens on; 0 if `admin` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_admin_port(admin: *const postbox_admin) -> u16 {
    guard(|| Ok(arg_ref(admin, "admin")?.server.addr().port()))
}

/// The token dead letters, commands and actions need (the one given, or the random one); NULL
/// only if `admin` is NULL. The string belongs to `admin` and lives until
/// `postbox_admin_stop`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_admin_token(admin: *const postbox_admin) -> *const c_char {
    guard(|| Ok(arg_ref(admin, "admin")?.token.as_ptr()))
}

/// Stops the endpoint (no new connections; the sampler ends; commands still running for a
/// remote caller are told to stop and end between two commits on their threads) and frees
/// `admin`. The store stays open. `admin`
/// may be NULL (no-op).
///
/// # Returns
/// `POSTBOX_OK`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_admin_stop(admin: *mut postbox_admin) -> c_int {
    guard(|| {
        if let Some(a) = take_box(admin) {
            a.server.stop();
        }
        Ok(POSTBOX_OK)
    })
}
