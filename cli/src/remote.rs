//! The command's side of `postbox --admin URL`: sends the command line to the application's
//! admin endpoint, which runs it on the store it holds, and plays back its output.
//!
//! Files stay on the caller's side: a body or import file named on the command line (or
//! standard input) is uploaded with the request, and an export file is written here from the
//! command's standard output (mode 0600, as a local export). Closing the connection (Ctrl-C)
//! stops the command in the application between two commits, as Ctrl-C does locally.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use clap::CommandFactory;
use postbox_admin::fail::{self, Failure, Outcome};
use postbox_admin::wire;
use postbox_admin::{Cli, Command};

/// What `--admin` commands put where STORE goes: the store is the application's.
pub const PLACEHOLDER_STORE: &str = "(admin)";

/// With `--admin URL` on the command line, inserts [`PLACEHOLDER_STORE`] after the command's
/// name, so that `postbox --admin URL queues` parses like `postbox queues STORE`. Other
/// command lines come back unchanged.
pub fn with_placeholder_store(args: Vec<OsString>) -> Vec<OsString> {
    let has_admin = args
        .iter()
        .any(|a| a == "--admin" || a.to_str().is_some_and(|s| s.starts_with("--admin=")));
    if !has_admin {
        return args;
    }
    let cmd = Cli::command();
    let names: Vec<String> = cmd
        .get_subcommands()
        .flat_map(|s| {
            std::iter::once(s.get_name().to_owned()).chain(s.get_all_aliases().map(str::to_owned))
        })
        .collect();
    // Options of the top level that take a value: their value is not the command's name.
    let takes_value = ["--admin", "--token"];
    let mut i = 1;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        if takes_value.contains(&a.as_ref()) {
            i += 2;
            continue;
        }
        if a.starts_with('-') {
            i += 1;
            continue;
        }
        if names.iter().any(|n| n == a.as_ref()) {
            let mut out = args;
            out.insert(i + 1, OsString::from(PLACEHOLDER_STORE));
            return out;
        }
        break;
    }
    args
}

fn too_large(url: &str) -> Failure {
    Failure::new(
        fail::REFUSED,
        format!(
            "the command and its input are larger than the admin endpoint {url} takes ({} MiB \
             with the input in base64): split the input, or run the command where the store's \
             file is (multi_process)",
            wire::MAX_REQUEST >> 20
        ),
    )
}

fn read_file(path: &Path) -> Outcome<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| Failure::not_found(format!("cannot read {}: {e}", path.display())))
}

fn read_stdin(what: &str) -> Outcome<Vec<u8>> {
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        eprintln!("reading {what} from standard input; end it with Ctrl-D");
    }
    let mut b = Vec::new();
    std::io::stdin().read_to_end(&mut b)?;
    Ok(b)
}

/// Runs `cli` (parsed from `args`) in the application serving `url`. The command's own
/// failure was already written to standard error by the application, so it comes back with
/// an empty message and only its exit code.
///
/// # Errors
///
/// The command's exit code; exit code 4 when the endpoint cannot be reached or does not
/// answer as an admin endpoint.
pub fn run(url: &str, args: &[OsString], cli: Cli) -> Outcome {
    let (stdin, output) = match &cli.command {
        Command::Send {
            body: None, file, ..
        } => match file {
            Some(f) => (read_file(f)?, None),
            None => (read_stdin("the body")?, None),
        },
        Command::Import { file, .. } => match file {
            Some(f) => (read_file(f)?, None),
            None => (read_stdin("messages")?, None),
        },
        Command::Export {
            file: Some(path), ..
        } => {
            let f = postbox_admin::create_private(path)
                .map_err(|e| Failure::store(format!("cannot create {}: {e}", path.display())))?;
            (Vec::new(), Some(f))
        }
        _ => (Vec::new(), None),
    };
    let mut strings = Vec::with_capacity(args.len());
    for a in args {
        match a.to_str() {
            Some(s) => strings.push(s.to_owned()),
            None => {
                return Err(Failure::usage(format!(
                    "{a:?} is not UTF-8: --admin sends the command line as text"
                )));
            }
        }
    }
    let request = wire::CommandRequest {
        args: strings,
        stdin_base64: B64.encode(&stdin),
    };
    let body = serde_json::to_vec(&request)
        .map_err(|e| Failure::usage(format!("cannot encode the command: {e}")))?;
    if body.len() > wire::MAX_REQUEST {
        return Err(too_large(url));
    }
    let endpoint = format!("{}/api/command", url.trim_end_matches('/'));
    let unreachable = |e: &dyn std::fmt::Display| {
        Failure::store(format!(
            "cannot reach the admin endpoint {url} ({e}); is the application running and \
             serving it (store.serve_admin)?"
        ))
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut call = agent
        .post(&endpoint)
        .header("Content-Type", "application/json");
    if let Some(t) = &cli.token {
        call = call.header(wire::TOKEN_HEADER, t);
    }
    let mut response = call.send(&body[..]).map_err(|e| unreachable(&e))?;
    if response.status() != 200 {
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        // The endpoint's errors are `{"error": …}`.
        let why = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|d| d["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| text.trim().to_owned());
        return Err(match status {
            403 => Failure::usage(format!(
                "the admin endpoint {url} refused the command ({why}): pass its token with                  --token TOKEN or POSTBOX_ADMIN_TOKEN"
            )),
            413 => too_large(url),
            _ => Failure::store(format!("the admin endpoint {url} answered {status}: {why}")),
        });
    }
    let mut reader = response.body_mut().as_reader();
    let mut out: Box<dyn Write> = match output {
        Some(f) => Box::new(std::io::BufWriter::new(f)),
        None => Box::new(std::io::stdout()),
    };
    loop {
        let frame = wire::read_frame(&mut reader).map_err(|e| unreachable(&e))?;
        match frame {
            Some((wire::OUT, bytes)) => {
                out.write_all(&bytes)?;
                out.flush()?;
            }
            Some((wire::HEARTBEAT, _)) => {}
            Some((wire::ERR, bytes)) => {
                let mut err = std::io::stderr();
                err.write_all(&bytes)?;
                err.flush()?;
            }
            Some((_, bytes)) => {
                let mut code = [0u8; 4];
                if bytes.len() == 4 {
                    code.copy_from_slice(&bytes);
                }
                out.flush()?;
                return match i32::from_le_bytes(code) {
                    fail::OK => Ok(()),
                    code => Err(Failure::new(code, "")),
                };
            }
            None => {
                return Err(Failure::store(format!(
                    "the admin endpoint {url} closed the connection before the command ended"
                )));
            }
        }
    }
}
