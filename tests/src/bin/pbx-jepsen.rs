//! A worker of the crash checker (`tests/jepsen.rs`): opens a store and runs producer,
//! peek-lock consumer and transactional consumer threads until it is killed, appending every
//! event to its own log (see `postbox_tests::history`) and echoing it to stdout so the parent
//! can aim its kills.
//!
//! Usage: `pbx-jepsen <store> <log> <name> [flags]`
//!
//! - `--multi`: open with `multi_process(true)`
//! - `--producers n`, `--consumers n`, `--tx n`: threads of each role (default 0)
//! - `--big`: producers sometimes send a batch too large for the write-ahead log
//! - `--lock-ms n`: the queue's lock duration (default 2000)
//! - `--hold-ms n`: consumers wait this long between a receive and its settle (default: a
//!   random short wait now and then)
//! - `--complete-only`: consumers always complete (default: complete, abandon or dead-letter)
//! - `--retry tok`: resend this keyed token first (a send the previous incarnation may not
//!   have finished)
//! - `--seed n`: the random choices
//!
//! Tokens are `<name>.<n>`; `name` is unique per incarnation, so tokens never repeat except
//! through `--retry`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use postbox::{Message, Queue, QueueOptions, Store};
use postbox_tests::Rng;
use postbox_tests::history::{Event, Logger, Op, TryKind, token_of};

/// The queue every worker uses; its options are the same in every process.
const QUEUE: &str = "work";
/// Producers pause while the queue holds more than this, so long runs stay small.
const BACKLOG: u64 = 400;

struct Config {
    store: String,
    name: String,
    multi: bool,
    producers: u64,
    consumers: u64,
    tx: u64,
    big: bool,
    lock_ms: u64,
    hold_ms: Option<u64>,
    complete_only: bool,
    retry: Vec<String>,
    seed: u64,
}

struct Worker {
    log: Logger,
    name: String,
    next: AtomicU64,
}

impl Worker {
    fn token(&self) -> String {
        format!(
            "{}.{}",
            self.name,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }
}

fn kind(e: &postbox::Error) -> String {
    format!("{:?}", e.kind())
}

fn body(token: &str, pad: usize) -> Vec<u8> {
    let mut b = token.as_bytes().to_vec();
    if pad > 0 {
        b.push(b'|');
        b.resize(b.len() + pad, b'x');
    }
    b
}

fn send_keyed(w: &Worker, q: &Queue, token: String) {
    w.log.log(&Event::Try {
        kind: TryKind::Key,
        tokens: vec![token.clone()],
    });
    match q.send_checked(Message::new(body(&token, 0)).message_key(token.clone())) {
        Ok(s) => w.log.log(&Event::Sent {
            acks: vec![(token, s.id.get())],
        }),
        Err(e) => w.log.log(&Event::SendFail {
            kind: kind(&e),
            tokens: vec![token],
        }),
    }
}

fn producer(w: &Worker, q: &Queue, big: bool, rng: &mut Rng) {
    for i in 0u64.. {
        if i % 16 == 0 {
            while q.len().is_ok_and(|n| n > BACKLOG) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let roll = rng.below(100);
        if roll < 10 {
            send_keyed(w, q, w.token());
            continue;
        }
        // A big batch (about 320 KiB) is committed to the store file directly, bypassing the
        // log: a kill right after its TRY lands in the middle of that commit.
        let (n, pad, how) = if big && roll >= 96 {
            (80, 4000, TryKind::Big)
        } else if roll >= 75 {
            (2 + rng.below(4) as usize, 0, TryKind::Batch)
        } else {
            (1, 0, TryKind::One)
        };
        let tokens: Vec<String> = (0..n).map(|_| w.token()).collect();
        w.log.log(&Event::Try {
            kind: how,
            tokens: tokens.clone(),
        });
        let result = if n == 1 {
            q.send(Message::new(body(&tokens[0], pad)))
                .map(|id| vec![id])
        } else {
            q.send_batch(tokens.iter().map(|t| Message::new(body(t, pad))))
        };
        match result {
            Ok(ids) => w.log.log(&Event::Sent {
                acks: tokens
                    .into_iter()
                    .zip(ids.iter().map(|id| id.get()))
                    .collect(),
            }),
            Err(e) => w.log.log(&Event::SendFail {
                kind: kind(&e),
                tokens,
            }),
        }
    }
}

fn consumer(w: &Worker, q: &Queue, cfg: &Config, rng: &mut Rng) {
    loop {
        let m = match q.receive(Duration::from_millis(100)) {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(e) => {
                w.log.log(&Event::SendFail {
                    kind: format!("receive:{}", kind(&e)),
                    tokens: vec!["-".into()],
                });
                continue;
            }
        };
        let (id, dc) = (m.id().get(), m.delivery_count());
        w.log.log(&Event::Recv {
            id,
            dc,
            token: token_of(m.body()),
            tx: false,
        });
        match cfg.hold_ms {
            Some(ms) => std::thread::sleep(Duration::from_millis(ms)),
            None if rng.below(5) == 0 => {
                std::thread::sleep(Duration::from_micros(rng.below(20_000)));
            }
            None => {}
        }
        let roll = if cfg.complete_only { 0 } else { rng.below(10) };
        let op = match roll {
            0..7 => Op::Complete,
            7..9 => Op::Abandon,
            _ => Op::DeadLetter,
        };
        w.log.log(&Event::Settling {
            op,
            id,
            dc,
            follow: None,
        });
        let result = match op {
            Op::Complete => m.complete(),
            Op::Abandon => m.abandon(),
            _ => m.dead_letter("jepsen", "chosen at random"),
        };
        w.log.log(&match result {
            Ok(()) => Event::Settled {
                op,
                id,
                dc,
                follow: None,
            },
            Err(e) if e.is_lock_lost() => Event::LockLost { op, id, dc },
            Err(e) => Event::Failed {
                op,
                id,
                dc,
                kind: kind(e.error()),
            },
        });
    }
}

fn transactional(w: &Worker, store: &Store, q: &Queue, rng: &mut Rng) {
    loop {
        let mut tx = store.begin();
        let m = match tx.receive(q, Duration::from_millis(100)) {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(e) => {
                w.log.log(&Event::SendFail {
                    kind: format!("receive:{}", kind(&e)),
                    tokens: vec!["-".into()],
                });
                continue;
            }
        };
        let (id, dc) = (m.id().get(), m.delivery_count());
        w.log.log(&Event::Recv {
            id,
            dc,
            token: token_of(m.body()),
            tx: true,
        });
        let token = w.token();
        w.log.log(&Event::TryFollow {
            id,
            dc,
            token: token.clone(),
        });
        let fid = match tx.send(q, Message::new(body(&token, 0))) {
            Ok(fid) => fid.get(),
            Err(e) => {
                w.log.log(&Event::SendFail {
                    kind: kind(&e),
                    tokens: vec![token],
                });
                continue;
            }
        };
        if rng.below(10) == 0 {
            // An abort gives the message back and drops the follow-up.
            match tx.abort() {
                Ok(()) => w.log.log(&Event::TxAbort { id, dc }),
                Err(e) => w.log.log(&Event::SendFail {
                    kind: format!("abort:{}", kind(&e)),
                    tokens: vec!["-".into()],
                }),
            }
            continue;
        }
        let follow = Some((token, fid));
        w.log.log(&Event::Settling {
            op: Op::Commit,
            id,
            dc,
            follow: follow.clone(),
        });
        w.log.log(&match tx.commit() {
            Ok(()) => Event::Settled {
                op: Op::Commit,
                id,
                dc,
                follow,
            },
            Err(e) if e.is_lock_lost() => Event::LockLost {
                op: Op::Commit,
                id,
                dc,
            },
            Err(e) => Event::Failed {
                op: Op::Commit,
                id,
                dc,
                kind: kind(&e),
            },
        });
    }
}

fn parse() -> (Config, String) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: pbx-jepsen <store> <log> <name> [flags]");
        std::process::exit(64);
    }
    let mut cfg = Config {
        store: args[0].clone(),
        name: args[2].clone(),
        multi: false,
        producers: 0,
        consumers: 0,
        tx: 0,
        big: false,
        lock_ms: 2000,
        hold_ms: None,
        complete_only: false,
        retry: Vec::new(),
        seed: 1,
    };
    let mut it = args[3..].iter();
    let num = |it: &mut std::slice::Iter<'_, String>| -> u64 {
        it.next().and_then(|v| v.parse().ok()).expect("a number")
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--multi" => cfg.multi = true,
            "--big" => cfg.big = true,
            "--complete-only" => cfg.complete_only = true,
            "--producers" => cfg.producers = num(&mut it),
            "--consumers" => cfg.consumers = num(&mut it),
            "--tx" => cfg.tx = num(&mut it),
            "--lock-ms" => cfg.lock_ms = num(&mut it),
            "--hold-ms" => cfg.hold_ms = Some(num(&mut it)),
            "--seed" => cfg.seed = num(&mut it),
            "--retry" => cfg.retry.push(it.next().expect("a token").clone()),
            other => {
                eprintln!("unknown flag {other}");
                std::process::exit(64);
            }
        }
    }
    (cfg, args[1].clone())
}

fn main() {
    let (cfg, log_path) = parse();
    let w = Arc::new(Worker {
        log: Logger::create(Path::new(&log_path), true).expect("create the event log"),
        name: cfg.name.clone(),
        next: AtomicU64::new(0),
    });
    w.log.log(&Event::Open);
    let store = match Store::builder().multi_process(cfg.multi).open(&cfg.store) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("open failed: {e}");
            std::process::exit(2);
        }
    };
    let options = QueueOptions::default()
        .lock_duration(Duration::from_millis(cfg.lock_ms))
        .max_deliveries(8)
        .dedup_window(Duration::from_secs(3600));
    let q = store.queue_with(QUEUE, options).expect("open the queue");
    w.log.log(&Event::Opened);
    for token in &cfg.retry {
        send_keyed(&w, &q, token.clone());
    }
    let cfg = Arc::new(cfg);
    let mut threads = Vec::new();
    let roles = [(cfg.producers, 0u64), (cfg.consumers, 1), (cfg.tx, 2)];
    for (count, role) in roles {
        for i in 0..count {
            let (w, q, store, cfg) = (w.clone(), q.clone(), store.clone(), cfg.clone());
            threads.push(std::thread::spawn(move || {
                let mut rng = Rng::new(cfg.seed ^ (role * 1000 + i + 1).wrapping_mul(0x9E37));
                match role {
                    0 => producer(&w, &q, cfg.big, &mut rng),
                    1 => consumer(&w, &q, &cfg, &mut rng),
                    _ => transactional(&w, &store, &q, &mut rng),
                }
            }));
        }
    }
    for t in threads {
        t.join().expect("worker thread");
    }
}
