//! A Rust producer of typed messages, for the cross-language tests of the typed-body envelope
//! (docs/typed-bodies.md): `python/tests/test_typed_bodies.py` and `tests/c/test_api.c` run it
//! and check that they read what Rust wrote.
//!
//! `typed_json_producer STORE QUEUE` sends to QUEUE of STORE (created if missing), in order:
//!
//! 1. the order below through `Queue::typed_json` (JSON, codec 1), which every language reads;
//! 2. the same order through `Queue::typed` (bincode, codec 2), which only Rust reads: a C or
//!    Python consumer dead-letters it with reason `DecodeFailed`.
//!
//! The store must not be open in single-process mode elsewhere. Prints the two ids.

use std::process::ExitCode;

use serde::{Deserialize, Serialize};

/// The value both messages carry. Its JSON is, byte for byte (the tests compare it):
/// `{"id":42,"item":"thé vert","quantity":3,"tags":["loose","organic"],"gift_note":null,"price":4.5}`
#[derive(Serialize, Deserialize)]
struct Order {
    id: u64,
    item: String,
    quantity: u32,
    tags: Vec<String>,
    gift_note: Option<String>,
    price: f64,
}

fn run(path: &str, queue: &str) -> postbox::Result<(postbox::MessageId, postbox::MessageId)> {
    let store = postbox::Store::open(path)?;
    let q = store.queue(queue)?;
    let order = Order {
        id: 42,
        item: "thé vert".into(),
        quantity: 3,
        tags: vec!["loose".into(), "organic".into()],
        gift_note: None,
        price: 4.5,
    };
    let json = q.typed_json::<Order>().send(&order)?;
    let bincode = q.typed::<Order>().send(&order)?;
    store.close()?;
    Ok((json, bincode))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, queue] = args.as_slice() else {
        eprintln!("usage: typed_json_producer STORE QUEUE");
        return ExitCode::from(2);
    };
    match run(path, queue) {
        Ok((json, bincode)) => {
            println!("json {json}");
            println!("bincode {bincode}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("typed_json_producer: {e}");
            ExitCode::FAILURE
        }
    }
}
