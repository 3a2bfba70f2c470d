//! `postbox_store_serve_admin`: the admin endpoint (dashboard, `/metrics`, `postbox --admin`)
//! served from inside a C application, over the same server the Rust API starts.

use std::ffi::{CString, c_char, c_int};

use postbox_cli::admin::{AdminOptions, AdminServer, serve_admin};

use crate::guard::{Failure, Out, arg_opt_str, arg_ref, arg_str, guard, take_box};
use crate::status::POSTBOX_OK;
use crate::store::postbox_store;

/// A running admin endpoint, from `postbox_store_serve_admin`. Stop and free it with
/// `postbox_admin_stop` (before closing its store). Its accessors are thread-safe.
pub struct postbox_admin {
    server: AdminServer,
    url: CString,
    token: Option<CString>,
}

/// Starts the admin endpoint of `store` on `addr` (`"host:port"`, e.g. `"127.0.0.1:9090"`;
/// port 0 picks a free one, see `postbox_admin_url`): the live dashboard page, `/metrics` in
/// Prometheus text format, and the commands of `postbox --admin URL`, so that the `postbox`
/// command reaches a store this process holds in single-process mode. It serves from threads
/// of its own until `postbox_admin_stop`.
///
/// Reading (the page, `/metrics`, commands that only look) needs nothing: bind to 127.0.0.1
/// unless the network may read the store. With `allow_actions` non-zero, the page's resubmit
/// button and `postbox --admin` commands that change the store are allowed for callers that
/// present the token: `token` (a NUL-terminated string), or a random one when `token` is NULL
/// (read it with `postbox_admin_token`). With `allow_actions` zero, `token` is ignored.
///
/// On success `*admin_out` receives a handle the caller owns and frees with
/// `postbox_admin_stop`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store`, `addr` or `admin_out`; an address
/// that does not parse; an empty token; invalid UTF-8); `POSTBOX_IO` when it cannot listen
/// there (address in use, no permission); `POSTBOX_CLOSED`; `POSTBOX_FORKED`.
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
        store.tag.check_process()?;
        let options = if allow_actions != 0 {
            AdminOptions::with_actions(token.map(str::to_owned))
        } else {
            AdminOptions::read_only()
        };
        let server = serve_admin(&store.store, addr, options)?;
        let text = |s: &str| {
            CString::new(s).map_err(|_| Failure::invalid("a NUL byte in the admin URL or token"))
        };
        let url = text(&server.url())?;
        let token = server.token().map(text).transpose()?;
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

/// The token actions need, or NULL when actions are off (or `admin` is NULL). The string
/// belongs to `admin` and lives until `postbox_admin_stop`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_admin_token(admin: *const postbox_admin) -> *const c_char {
    guard(|| {
        let admin = arg_ref(admin, "admin")?;
        Ok(admin
            .token
            .as_ref()
            .map_or(std::ptr::null(), |t| t.as_ptr()))
    })
}

/// Stops the endpoint (no new connections; the sampler ends; commands already running for a
/// remote caller finish on their threads) and frees `admin`. The store stays open. `admin`
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
