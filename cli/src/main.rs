//! `postbox`: look inside, fix and drive postbox stores from the command line.
//!
//! The commands live in the library (`postbox_cli`), so that an application serving the admin
//! endpoint runs exactly the same code for `postbox --admin`; this file parses the command
//! line, installs the Ctrl-C handler, and runs the command here or in that application.

use std::process::ExitCode;
use std::sync::atomic::Ordering;

use clap::Parser;
use postbox_cli::fail;
use postbox_cli::{Cli, STOP};

fn main() -> ExitCode {
    let args = postbox_cli::admin::remote::with_placeholder_store(std::env::args_os().collect());
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
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
    // The first Ctrl-C asks long commands to stop between commits; a second one ends the
    // process at once, which is still safe: every commit is atomic and the locks of a process
    // that dies are released. A remote command stops when this process's connection closes.
    let installed = ctrlc::set_handler(|| {
        if STOP.swap(true, Ordering::SeqCst) {
            std::process::exit(fail::INTERRUPTED);
        }
    });
    if let Err(e) = installed {
        eprintln!("postbox: warning: Ctrl-C will not stop cleanly: {e}");
    }
    let json = cli.json;
    let outcome = match cli.admin.clone() {
        Some(url) => postbox_cli::admin::remote::run(&url, &args, cli),
        None => postbox_cli::run(cli),
    };
    match outcome {
        Ok(()) => exit(fail::OK),
        Err(f) if f.code == fail::OK => exit(fail::OK),
        Err(f) => {
            // A remote command's failure was written by the application already.
            if !f.message.is_empty() {
                postbox_cli::report(&f, json);
            }
            exit(f.code)
        }
    }
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}
