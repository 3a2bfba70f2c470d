//! `postbox bridge --config FILE`: runs a store-and-forward bridge to RabbitMQ until Ctrl-C,
//! with a live status line and, given `bind`, the dashboard with the bridge's counters on
//! `/metrics`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postbox::Store;
use postbox_admin::fail::{Failure, Outcome};
use postbox_admin::{AdminOptions, AdminServer, ExtraMetrics, Stop, serve_admin};
use postbox_bridge::{Bridge, BridgeConfig};

/// How often a status line is written when standard error is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);

pub fn bridge(
    config: &Path,
    store: Option<PathBuf>,
    bind: Option<String>,
    json: bool,
    stop: &Stop,
) -> Outcome {
    let mut config = BridgeConfig::from_file(config)?;
    let path = store.or_else(|| config.store.take()).ok_or_else(|| {
        Failure::usage("no store: give --store or `store = \"…\"` in the configuration")
    })?;
    let store = Store::builder().multi_process(true).open(&path)?;
    let bind = bind.or_else(|| config.bind.take());
    let bridge = Arc::new(Bridge::start(&store, config)?);
    let server = match &bind {
        Some(addr) => {
            let b = bridge.clone();
            let mut options = AdminOptions::read_only();
            options.extra_metrics = Some(ExtraMetrics(Arc::new(move || b.stats().prometheus())));
            Some(serve_admin(&store, addr, options)?)
        }
        None => None,
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "store": path.display().to_string(),
                "links": bridge.stats().links.len(),
                "metrics": server.as_ref().map(|s| format!("{}metrics", s.url())),
                "dashboard": server.as_ref().map(AdminServer::page_url),
                "token": server.as_ref().map(AdminServer::token),
            })
        );
    } else {
        println!(
            "postbox bridge for {}: {} links",
            path.display(),
            bridge.stats().links.len()
        );
        if let Some(s) = &server {
            println!("  dashboard: {}", s.page_url());
            println!("  metrics:   {}metrics", s.url());
            println!("  token:     {} (dead letters on the page)", s.token());
        }
        println!("Ctrl-C to stop.");
    }
    let live = !json && std::io::stderr().is_terminal();
    let mut logged = Instant::now();
    while !stop.is_stopped() {
        std::thread::sleep(Duration::from_millis(250));
        let stats = bridge.stats();
        if live {
            tell_raw(&format!("\r\x1b[2K{}", stats.status_line()));
        } else if logged.elapsed() >= LOG_EVERY {
            logged = Instant::now();
            if json {
                println!("{}", stats_json(&stats));
            } else {
                eprintln!("{}", stats.status_line());
            }
        }
    }
    if live {
        eprintln!();
    }
    if let Some(s) = server {
        s.stop();
    }
    let last = match Arc::try_unwrap(bridge) {
        Ok(b) => b.stop(),
        Err(b) => b.stats(),
    };
    if json {
        println!("{}", stats_json(&last));
    } else {
        println!("stopped: {}", last.status_line());
    }
    store.close()?;
    Ok(())
}

fn tell_raw(s: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(s.as_bytes());
    let _ = err.flush();
}

fn stats_json(s: &postbox_bridge::BridgeStats) -> serde_json::Value {
    serde_json::json!({
        "links": s.links.iter().map(|l| serde_json::json!({
            "direction": l.direction.as_str(),
            "local": l.local,
            "remote": l.remote,
            "connected": l.connected,
            "forwarded": l.forwarded,
            "in_flight": l.in_flight,
            "reconnects": l.reconnects,
            "republished": l.republished,
            "nacked": l.nacked,
            "dead_lettered": l.dead_lettered,
            "rejected": l.rejected,
            "local_retries": l.local_retries,
            "last_error": l.last_error,
        })).collect::<Vec<_>>(),
    })
}
