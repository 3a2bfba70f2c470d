//! The admin endpoint of a postbox store, and the commands of the `postbox` tool.
//!
//! An application that holds its store in single-process mode (the default) keeps every other
//! process out, the `postbox` command included. [`serve_admin`] lets it expose the store
//! without giving that up: a small HTTP server on threads of its own serves the live
//! dashboard, `/metrics` in Prometheus text format, and the commands of
//! `postbox --admin URL`, which run here, on the application's open store, with exactly the
//! code the `postbox` command runs locally ([`run`]).
//!
//! ```no_run
//! use postbox::Store;
//! use postbox_admin::ServeAdmin;
//!
//! let store = Store::open("app.postbox")?;
//! let admin = store.serve_admin("127.0.0.1:9090")?;
//! println!("dashboard: {}", admin.page_url());
//! # Ok::<(), postbox::Error>(())
//! ```
//!
//! The commands take their arguments as the `postbox` command line does ([`Cli`], parsed with
//! clap) and a [`Stop`] token: a long command (a redrive, an export, `stats --watch`) stops
//! between two commits once it is set. This crate installs no signal handler; the `postbox`
//! binary sets the token on Ctrl-C, and the admin endpoint when a remote caller goes away.
//!
//! The C library and the Python module carry this crate only when built with their `admin`
//! feature (README § Features and defaults). See docs/design.md § Admin endpoint.
//!
//! - `commands`: the command line ([`Cli`]) and every command's implementation;
//! - `server`: the HTTP server, its routes, the sampler behind the page and `/metrics`;
//! - `io`: where a command's output goes (the terminal, or a remote caller's stream) and
//!   whether it should stop; [`wire`] is the framed stream of a remote command's output;
//! - [`fail`]: the exit codes and the one error type every command returns.

#[macro_use]
mod io;
mod commands;
pub mod fail;
mod server;
mod stop;
pub mod wire;

pub use commands::{Cli, Command, QueueArg, SendProps, report};
pub use io::create_private;
pub use server::{AdminOptions, AdminServer, ExtraMetrics, ServeAdmin, serve_admin};
pub use stop::Stop;

/// Runs a parsed command line on the store its STORE argument names, here, writing to this
/// process's standard output and error; a long command stops between two commits once `stop`
/// is set.
///
/// # Errors
///
/// The command's [`fail::Failure`], whose `code` is the process's exit code.
pub fn run(cli: Cli, stop: &Stop) -> fail::Outcome {
    let _scope = io::entered(io::Scope::local(stop));
    match cli.command {
        Command::Dashboard {
            store,
            bind,
            allow_actions,
        } => server::dashboard(
            &commands::open_store(&store)?,
            &bind,
            allow_actions,
            cli.json,
        ),
        command => commands::execute(command, cli.json, None),
    }
}
