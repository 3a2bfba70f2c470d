//! The `postbox` command's commands: the command line ([`Cli`]) and what each command does.
//!
//! Every command takes the store's path first: `postbox [--json] <command> STORE [args]`.
//! The store is opened in multi-process mode, so the command works on a closed store and on
//! one that applications have open with `multi_process`. An application holding its store in
//! single-process mode serves the admin endpoint instead ([`crate::serve_admin`]), and
//! `postbox --admin URL` runs the same commands inside it ([`run_served`]). See
//! docs/design.md § Command-line tool and § Admin endpoint.

mod act;
mod demo;
pub(crate) mod inspect;
pub(crate) mod record;
mod recover;
mod table;
mod transfer;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use postbox::{ErrorKind, Queue, Store};

use crate::fail::{self, Failure, Outcome};
use crate::io;

#[derive(Parser)]
#[command(
    name = "postbox",
    version,
    about = "Look inside, fix and drive postbox stores",
    long_about = "Look inside, fix and drive postbox stores.\n\n\
        Every command takes the store's path first: postbox [--json] <COMMAND> STORE [ARGS].\n\
        The store is opened in multi-process mode, so this works on a closed store and on one \
        that applications have open with multi_process. Human tables by default; --json \
        prints one JSON document, or JSON Lines (one object per line) for lists of messages.\n\n\
        Ctrl-C stops a long command between two commits: what was committed stays, nothing \
        is half-done, and the command exits with 130.",
    after_help = fail::EXIT_CODES_HELP
)]
pub struct Cli {
    /// Print JSON for scripts instead of tables (JSON Lines for lists of messages).
    #[arg(long, global = true)]
    pub json: bool,

    /// Run the command in the application serving this admin endpoint (its
    /// store.serve_admin), e.g. http://127.0.0.1:9090; the command then takes no STORE.
    #[arg(long, global = true, value_name = "URL")]
    pub admin: Option<String>,

    /// The admin endpoint's token, which every --admin command needs (printed by
    /// `postbox dashboard`; AdminServer.token in the application).
    #[arg(
        long,
        global = true,
        env = "POSTBOX_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

/// A queue, or with `--dead-letters` its dead-letter queue.
#[derive(Args, Clone)]
pub struct QueueArg {
    /// The queue's name.
    pub queue: String,
    /// Use the queue's dead-letter queue instead.
    #[arg(long, short = 'D')]
    pub dead_letters: bool,
}

/// The properties `send` can set, one flag each.
#[derive(Args, Clone, Default)]
pub struct SendProps {
    /// A short description for people.
    #[arg(long)]
    label: Option<String>,
    /// The MIME type of the body, e.g. application/json.
    #[arg(long)]
    content_type: Option<String>,
    /// Correlation id (e.g. the id of the request this answers).
    #[arg(long)]
    correlation_id: Option<String>,
    /// The queue replies should go to.
    #[arg(long)]
    reply_to: Option<String>,
    /// Key for duplicate detection (queues with a dedup window).
    #[arg(long)]
    message_key: Option<String>,
    /// Session group: messages of a group are delivered in order.
    #[arg(long)]
    group: Option<String>,
    /// Position in its group's series (for collators).
    #[arg(long)]
    sequence: Option<u64>,
    /// Priority 0 (lowest) to 7 (highest); default 3.
    #[arg(long)]
    priority: Option<u8>,
    /// Time to live, e.g. 30s, 10m, 2h.
    #[arg(long, value_parser = parse_duration)]
    ttl: Option<Duration>,
    /// Absolute expiry, RFC 3339 (e.g. 2030-01-01T00:00:00Z).
    #[arg(long, conflicts_with = "ttl")]
    expires_at: Option<String>,
    /// Deliver no earlier than this long from now, e.g. 5m.
    #[arg(long, value_parser = parse_duration)]
    delay: Option<Duration>,
    /// Deliver no earlier than this time, RFC 3339.
    #[arg(long, conflicts_with = "delay")]
    at: Option<String>,
    /// A user property KEY=VALUE (repeat for more).
    #[arg(long = "property", short = 'p', value_name = "KEY=VALUE")]
    properties: Vec<String>,
}

#[derive(Subcommand)]
pub enum Command {
    /// List queues: options, exact counts, oldest receivable message, last activity.
    Queues { store: PathBuf },
    /// Exact counts per queue; with --watch, refreshed live with rates.
    Stats {
        store: PathBuf,
        /// Only these queues (default: all).
        queues: Vec<String>,
        /// Refresh until Ctrl-C.
        #[arg(long, short)]
        watch: bool,
        /// Time between refreshes with --watch.
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
        interval: Duration,
    },
    /// List the receivable messages of a queue in delivery order, without locking them.
    Browse {
        store: PathBuf,
        #[command(flatten)]
        queue: QueueArg,
        /// Show at most N messages.
        #[arg(long, short = 'n')]
        limit: Option<usize>,
    },
    /// Show the message a receive would take next, without locking it.
    Peek {
        store: PathBuf,
        #[command(flatten)]
        queue: QueueArg,
    },
    /// Show one message of a queue by id, whatever its state.
    Get {
        store: PathBuf,
        #[command(flatten)]
        queue: QueueArg,
        id: u64,
    },
    /// Create a store (an empty file that applications and the other commands open) and the
    /// queues named; a store or queue that exists is kept as it is.
    Create {
        store: PathBuf,
        /// Queues to create in it.
        queues: Vec<String>,
    },
    /// Send a message: the body as argument, from --file, or from standard input.
    Send {
        store: PathBuf,
        queue: String,
        /// The body (default: --file, else standard input).
        body: Option<String>,
        /// Read the body from this file.
        #[arg(long, short, conflicts_with = "body")]
        file: Option<PathBuf>,
        /// Create the queue if it does not exist, and the store too.
        #[arg(long)]
        create: bool,
        #[command(flatten)]
        props: Box<SendProps>,
    },
    /// Receive the next message under a lock, show it, then settle it (default: abandon).
    Receive {
        store: PathBuf,
        #[command(flatten)]
        queue: QueueArg,
        /// How long to wait for a message.
        #[arg(long, short, default_value = "0s", value_parser = parse_duration)]
        timeout: Duration,
        /// Complete it: removed for good.
        #[arg(long, group = "settle")]
        complete: bool,
        /// Abandon it: back in the queue, its delivery counted (the default).
        #[arg(long, group = "settle")]
        abandon: bool,
        /// Move it to the dead-letter queue with this reason.
        #[arg(long, group = "settle", value_name = "REASON")]
        dead_letter: Option<String>,
        /// The dead-letter description.
        #[arg(long, requires = "dead_letter", default_value = "")]
        description: String,
    },
    /// Remove every message of a queue (its dead-letter queue is left alone).
    Purge {
        store: PathBuf,
        #[command(flatten)]
        queue: QueueArg,
    },
    /// List a queue's dead letters with their reasons and descriptions.
    DeadLetters {
        store: PathBuf,
        queue: String,
        /// Show at most N.
        #[arg(long, short = 'n')]
        limit: Option<usize>,
    },
    /// Move dead letters back to their queue: all, or those matching every filter given.
    #[command(alias = "resubmit")]
    Redrive {
        store: PathBuf,
        queue: String,
        /// Only dead letters with this reason.
        #[arg(long)]
        reason: Option<String>,
        /// Only those dead-lettered at least this long ago, e.g. 1h.
        #[arg(long, value_parser = parse_duration)]
        older_than: Option<Duration>,
        /// Only these ids (repeat for more).
        #[arg(long = "id")]
        ids: Vec<u64>,
        /// At most this many per second, e.g. 50 or 50/s.
        #[arg(long, value_parser = parse_rate)]
        rate: Option<f64>,
        /// At most N messages.
        #[arg(long, short = 'n')]
        limit: Option<usize>,
        /// Only list what would be moved.
        #[arg(long)]
        dry_run: bool,
    },
    /// Move the receivable messages of SRC to DST, each batch in one transaction.
    Move {
        store: PathBuf,
        /// Source queue (NAME/$deadletterqueue for a dead-letter queue).
        src: String,
        /// Destination queue.
        dst: String,
        /// At most N messages.
        #[arg(long, short = 'n')]
        limit: Option<usize>,
        /// Create DST if it does not exist.
        #[arg(long)]
        create: bool,
    },
    /// Write every message of a queue, whatever its state, as JSON Lines (to FILE or standard
    /// output).
    Export {
        store: PathBuf,
        #[command(flatten)]
        queue: QueueArg,
        file: Option<PathBuf>,
        /// At most N messages.
        #[arg(long, short = 'n')]
        limit: Option<usize>,
    },
    /// Send the messages of a JSON Lines file (or standard input) to a queue.
    Import {
        store: PathBuf,
        queue: String,
        file: Option<PathBuf>,
        /// Create the queue if it does not exist, and the store too.
        #[arg(long)]
        create: bool,
    },
    /// Check the store's integrity: verify every page, then read every queue and message.
    Check { store: PathBuf },
    /// Open a store that crashed and whose write-ahead log is missing or damaged, giving up
    /// the work only that log held, and report what was lost (every other command refuses
    /// such a store).
    Recover { store: PathBuf },
    /// Give the space of deleted queues and purged messages back to the file system.
    Compact { store: PathBuf },
    /// Write a consistent copy of the store (open or not) to DEST.
    Backup {
        store: PathBuf,
        dest: PathBuf,
        /// Replace DEST if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Create a store with a few queues and messages to try the other commands on.
    Demo { store: PathBuf },
    /// Serve the live dashboard and /metrics for STORE until Ctrl-C.
    Dashboard {
        store: PathBuf,
        /// Address to listen on; port 0 picks a free one. Anything but 127.0.0.1 shows the
        /// counts to the network, and all the rest to whoever has the token (plain HTTP).
        #[arg(long, default_value = "127.0.0.1:8080")]
        bind: String,
        /// Allow actions (the page's resubmit and purge buttons, --admin commands that change
        /// the store). Dead letters, the buttons and --admin commands always need the token
        /// printed at start.
        #[arg(long)]
        allow_actions: bool,
    },
    /// Hold the store open until standard input closes (for tests of live stores).
    #[command(hide = true)]
    Hold {
        store: PathBuf,
        /// Open it in single-process mode, as applications do by default.
        #[arg(long)]
        single_process: bool,
    },
}

impl Command {
    /// Whether the command changes the store (an admin endpoint runs it only with actions
    /// allowed and the token); the others only read.
    pub fn changes_store(&self) -> bool {
        !matches!(
            self,
            Command::Queues { .. }
                | Command::Stats { .. }
                | Command::Browse { .. }
                | Command::Peek { .. }
                | Command::Get { .. }
                | Command::DeadLetters { .. }
                | Command::Export { .. }
                | Command::Check { .. }
                | Command::Backup { .. }
                | Command::Dashboard { .. }
        ) && !matches!(self, Command::Redrive { dry_run: true, .. })
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like 30s, 5m, 2h: {e}"))
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let n = s.strip_suffix("/s").unwrap_or(s);
    match n.parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(r),
        _ => Err(format!("{s:?} is not a rate like 50 or 50/s")),
    }
}

/// Opens an existing store the way every command does: in multi-process mode.
pub fn open_store(path: &Path) -> Outcome<Store> {
    open_with(path, Store::builder().multi_process(true))
}

/// Opens an existing store with `builder`, reporting a single-process holder as busy.
pub fn open_with(path: &Path, builder: postbox::StoreBuilder) -> Outcome<Store> {
    if !path.exists() {
        return Err(Failure::not_found(format!(
            "no store at {} (postbox create {} makes one; --create on send and import does too)",
            path.display(),
            path.display()
        )));
    }
    open_or_create(path, builder)
}

/// Opens the store at `path` in multi-process mode, creating it if it does not exist (as
/// `sqlite3 FILE` does); an existing store is opened as it is.
pub fn create_store(path: &Path) -> Outcome<Store> {
    open_or_create(path, Store::builder().multi_process(true))
}

fn open_or_create(path: &Path, builder: postbox::StoreBuilder) -> Outcome<Store> {
    builder.open(path).map_err(|e| match e.kind() {
        ErrorKind::AlreadyOpen => busy(path),
        _ => Failure::from(e),
    })
}

/// The refusal of a store held in single-process mode, with the fix spelt in every language:
/// the command cannot know which one the holder is written in.
fn busy(path: &Path) -> Failure {
    let spellings: Vec<String> = postbox::binding::Language::ALL
        .iter()
        .map(|l| format!("{}: {}", l.name(), l.multi_process()))
        .collect();
    Failure::new(
        fail::BUSY,
        format!(
            "{} is held by another process in single-process mode, which keeps every other \
             process out.\nEither open the store in that application in multi-process mode \
             ({}), or use the application's admin endpoint: postbox --admin \
             http://127.0.0.1:PORT <command>.",
            path.display(),
            spellings.join("; ")
        ),
    )
}

/// Opens queue `name`, or its dead-letter queue.
fn open_queue(store: &Store, q: &QueueArg) -> Outcome<Queue> {
    let queue = store.open_queue(&q.queue)?;
    if q.dead_letters {
        Ok(queue.dead_letters()?)
    } else {
        Ok(queue)
    }
}

/// Runs a parsed command line on `store`, an application's open store, for a remote caller
/// (`postbox --admin`): the STORE argument is ignored, FILE arguments refer to the caller's
/// files (uploaded as standard input, or written from standard output by the caller), and
/// commands that need the store's file itself are refused. The caller has entered the
/// console's scope (`io::entered`).
pub(crate) fn run_served(store: &Store, cli: Cli) -> Outcome {
    execute(cli.command, cli.json, Some(store))
}

/// Runs `command`, on the store its STORE argument names or on `served`, in the scope the
/// calling thread entered.
pub(crate) fn execute(command: Command, json: bool, served: Option<&Store>) -> Outcome {
    let open_store = |path: &Path| -> Outcome<Store> {
        match served {
            Some(s) => Ok(s.clone()),
            None => open_store(path),
        }
    };
    // `--create` makes a missing store too (a served store exists: it is the application's).
    let open_or_create = |path: &Path, create: bool| -> Outcome<Store> {
        match served {
            Some(s) => Ok(s.clone()),
            None if create => create_store(path),
            None => open_store(path),
        }
    };
    let local_only = |what: &str| -> Outcome {
        match served {
            Some(_) => Err(Failure::usage(format!(
                "{what} works on the store's file, not through --admin: run it where the \
                 store is closed or opened with multi_process"
            ))),
            None => Ok(()),
        }
    };
    // A remote caller's files travel in the request and the response (see `run_served`).
    let their_file = |file: Option<PathBuf>| if served.is_some() { None } else { file };
    match command {
        Command::Queues { store } => inspect::queues(&open_store(&store)?, json),
        Command::Stats {
            store,
            queues,
            watch,
            interval,
        } => inspect::stats(&open_store(&store)?, &queues, watch, interval, json),
        Command::Browse {
            store,
            queue,
            limit,
        } => inspect::browse(&open_queue(&open_store(&store)?, &queue)?, limit, json),
        Command::Peek { store, queue } => {
            inspect::peek(&open_queue(&open_store(&store)?, &queue)?, json)
        }
        Command::Get { store, queue, id } => {
            inspect::get(&open_queue(&open_store(&store)?, &queue)?, id, json)
        }
        Command::DeadLetters {
            store,
            queue,
            limit,
        } => inspect::dead_letters(&open_store(&store)?.open_queue(&queue)?, limit, json),
        Command::Create { store, queues } => {
            let existed = served.is_some() || store.exists();
            act::create(
                &open_or_create(&store, true)?,
                &store,
                existed,
                &queues,
                json,
            )
        }
        Command::Send {
            store,
            queue,
            body,
            file,
            create,
            props,
        } => act::send(
            &open_or_create(&store, create)?,
            &queue,
            body,
            their_file(file),
            create,
            &props,
            json,
        ),
        Command::Receive {
            store,
            queue,
            timeout,
            complete,
            abandon: _,
            dead_letter,
            description,
        } => {
            let settle = match (complete, dead_letter) {
                (true, _) => act::Settle::Complete,
                (false, Some(reason)) => act::Settle::DeadLetter(reason, description),
                (false, None) => act::Settle::Abandon,
            };
            act::receive(
                &open_queue(&open_store(&store)?, &queue)?,
                timeout,
                settle,
                json,
            )
        }
        Command::Purge { store, queue } => {
            act::purge(&open_queue(&open_store(&store)?, &queue)?, json)
        }
        Command::Redrive {
            store,
            queue,
            reason,
            older_than,
            ids,
            rate,
            limit,
            dry_run,
        } => act::redrive(
            &open_store(&store)?.open_queue(&queue)?,
            &act::RedriveFilter {
                reason,
                older_than,
                ids,
                limit,
            },
            rate,
            dry_run,
            json,
        ),
        Command::Move {
            store,
            src,
            dst,
            limit,
            create,
        } => act::move_messages(&open_store(&store)?, &src, &dst, limit, create, json),
        Command::Export {
            store,
            queue,
            file,
            limit,
        } => transfer::export(
            &open_queue(&open_store(&store)?, &queue)?,
            their_file(file).as_deref(),
            limit,
            json,
        ),
        Command::Import {
            store,
            queue,
            file,
            create,
        } => transfer::import(
            &open_or_create(&store, create)?,
            &queue,
            their_file(file).as_deref(),
            create,
            json,
        ),
        Command::Compact { store } => transfer::compact(&open_store(&store)?, json),
        Command::Check { store } => {
            local_only("check")?;
            transfer::check(&store, json)
        }
        Command::Recover { store } => {
            local_only("recover")?;
            recover::recover(&store, json)
        }
        Command::Backup { store, dest, force } => {
            local_only("backup")?;
            transfer::backup(&store, &dest, force, json)
        }
        Command::Demo { store } => {
            local_only("demo")?;
            demo::demo(&store, json)
        }
        Command::Dashboard { .. } => {
            local_only("dashboard")?;
            // `crate::run` serves it; nothing else runs a command line.
            Err(Failure::usage(
                "postbox dashboard runs from the postbox command",
            ))
        }
        Command::Hold {
            store,
            single_process,
        } => {
            local_only("hold")?;
            hold(&store, single_process)
        }
    }
}

/// Keeps the store open until standard input reaches its end, announcing on standard output
/// when it is open, so a test can run commands against a store in use.
fn hold(path: &Path, single_process: bool) -> Outcome {
    let store = if single_process {
        Store::open(path)?
    } else {
        Store::builder().multi_process(true).open(path)?
    };
    say!("holding {}", path.display());
    let mut sink = Vec::new();
    io::stdin().read_to_end(&mut sink)?;
    store.close()?;
    Ok(())
}

/// Writes a failed command's message to its standard error: one JSON document with `--json`
/// (`{"error": …, "exit_code": …}`), else `postbox: …`.
pub fn report(f: &Failure, json: bool) {
    if json {
        tell!(
            "{}",
            serde_json::json!({ "error": f.message, "exit_code": f.code })
        );
    } else {
        tell!("postbox: {f}");
    }
}
