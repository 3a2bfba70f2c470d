//! The admin endpoint: a small HTTP server inside the process that holds a store, serving the
//! live dashboard, `/metrics` in Prometheus text format, the JSON the dashboard reads, and the
//! commands of `postbox --admin`.
//!
//! An application that holds its store in single-process mode (the default) keeps every other
//! process out, the `postbox` command included; [`serve_admin`] lets it expose the store to
//! the command and to a browser without giving that up. `postbox dashboard STORE` serves the
//! same endpoint from the command line for a closed or multi-process store ([`dashboard`]).
//!
//! - `sampler` reads every queue's counts and traffic once a second and keeps two minutes of
//!   them for rates and charts;
//! - `http` accepts connections and reads requests within fixed bounds (a pool of workers,
//!   a cap on connections, timeouts, body caps); `routes` routes them, and `access` decides
//!   who may ask what (the `Host` a request must name, the token); `crate::wire` is the framed
//!   stream a remote command's output travels in;
//! - `metrics` writes the Prometheus text; `page` is the dashboard itself (one HTML file with
//!   its script and style, no build step).

mod access;
mod http;
mod metrics;
mod page;
mod routes;
mod sampler;

pub use routes::{AdminOptions, AdminServer, ExtraMetrics, ServeAdmin, serve_admin};

use std::time::Duration;

use postbox::Store;

use crate::fail::Outcome;
use crate::io::stopping;

/// `postbox dashboard`: serves the endpoint for `store` until Ctrl-C.
pub(crate) fn dashboard(store: &Store, bind: &str, allow_actions: bool, json: bool) -> Outcome {
    let server = serve_admin(
        store,
        bind,
        AdminOptions {
            allow_actions,
            ..AdminOptions::default()
        },
    )?;
    if json {
        say!(
            "{}",
            serde_json::json!({
                "url": server.url(),
                "page": server.page_url(),
                "metrics": format!("{}metrics", server.url()),
                "token": server.token(),
                "actions": server.actions_allowed(),
            })
        );
    } else {
        say!("postbox dashboard for {}", store.path().display());
        say!("  page:     {}", server.page_url());
        say!("  metrics:  {}metrics", server.url());
        say!(
            "  token:    {} (the page's dead letters and buttons; postbox --admin {} --token …)",
            server.token(),
            server.url()
        );
        if server.actions_allowed() {
            say!("  actions:  allowed with the token");
        } else {
            say!("  actions:  off (--allow-actions turns them on)");
        }
        say!("Ctrl-C to stop.");
    }
    while !stopping() {
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
    Ok(())
}
