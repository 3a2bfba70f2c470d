//! `postbox`: look inside, fix and drive postbox stores from the command line.
//!
//! The commands live in the library `postbox_admin`, so that an application serving the admin
//! endpoint runs exactly the same code for `postbox --admin`. This binary parses the command
//! line, turns Ctrl-C into the commands' stop token, and runs the command here or in that
//! application (`remote`). It adds the one command the library leaves out, `postbox bridge`
//! (`bridge`), so that the library, which the C library and the Python module link, carries no
//! AMQP client.

mod bridge;
mod remote;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Subcommand};
use postbox_admin::fail::{self, Failure};
use postbox_admin::{Cli, Stop};

/// The commands of this binary beside the library's.
#[derive(Subcommand)]
enum Local {
    /// Forward between local queues and RabbitMQ (quorum queues) until Ctrl-C, as the TOML
    /// file FILE says: brokers, links (outgoing or incoming), in-flight bounds. A status
    /// line shows each link; with a bind address, the dashboard serves the bridge's counters
    /// on /metrics too.
    Bridge {
        /// The configuration file (see docs/bridge.md, "Beyond one machine").
        #[arg(long)]
        config: PathBuf,
        /// The store (instead of the file's `store`); created when missing.
        #[arg(long)]
        store: Option<PathBuf>,
        /// Serve the dashboard and /metrics here (instead of the file's `bind`).
        #[arg(long)]
        bind: Option<String>,
    },
}

fn main() -> ExitCode {
    let args = remote::with_placeholder_store(std::env::args_os().collect());
    let matches = match Local::augment_subcommands(Cli::command()).try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => {
            // Help and version are successes; anything else is a usage error (1), not clap's 2,
            // which means "not found" here.
            let code = if e.use_stderr() {
                fail::USAGE
            } else {
                fail::OK
            };
            let _ = e.print();
            return exit(code);
        }
    };
    let json = matches.get_flag("json");
    // The first Ctrl-C asks long commands to stop between commits; a second one ends the
    // process at once, which is still safe: every commit is atomic and the locks of a process
    // that dies are released. A remote command stops when this process's connection closes.
    let stop = Stop::new();
    let installed = {
        let stop = stop.clone();
        ctrlc::set_handler(move || {
            if stop.stop() {
                std::process::exit(fail::INTERRUPTED);
            }
        })
    };
    if let Err(e) = installed {
        eprintln!("postbox: warning: Ctrl-C will not stop cleanly: {e}");
    }
    let outcome = match matches.subcommand_name() {
        Some(name) if Local::has_subcommand(name) => {
            match Local::from_arg_matches(&matches).map_err(|e| Failure::usage(e.to_string())) {
                Err(f) => Err(f),
                Ok(_) if matches.get_one::<String>("admin").is_some() => Err(Failure::usage(
                    format!("{name} runs here, beside the store, not through --admin"),
                )),
                Ok(Local::Bridge {
                    config,
                    store,
                    bind,
                }) => bridge::bridge(&config, store, bind, json, &stop),
            }
        }
        _ => match Cli::from_arg_matches(&matches) {
            Err(e) => Err(Failure::usage(e.to_string())),
            Ok(cli) => match cli.admin.clone() {
                Some(url) => remote::run(&url, &args, cli),
                None => postbox_admin::run(cli, &stop),
            },
        },
    };
    match outcome {
        Ok(()) => exit(fail::OK),
        Err(f) if f.code == fail::OK => exit(fail::OK),
        Err(f) => {
            // A remote command's failure was written by the application already.
            if !f.message.is_empty() {
                postbox_admin::report(&f, json);
            }
            exit(f.code)
        }
    }
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}
