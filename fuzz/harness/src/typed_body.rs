//! Target `typed_body`: the typed-body envelope and the decoders of typed bodies (bincode for
//! typed queues, JSON and bincode behind the envelope) on arbitrary bytes. A body comes from
//! whoever could send to the queue, so a receiver must get an error, never a panic or an
//! allocation the body's size does not justify.

use std::collections::BTreeMap;

use postbox::{CODEC_BINCODE, CODEC_JSON, TypedBody};
use serde::{Deserialize, Serialize};

const MAX_INPUT: usize = 64 * 1024;

#[derive(Debug, Serialize, Deserialize, PartialEq)]
enum Kind {
    Unit,
    Number(u16),
    Point { x: f64, y: i64 },
    Text(String),
}

/// Recursive: bincode decodes a level per byte, so a long body nests deep.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
enum Tree {
    Leaf,
    Node(Box<Tree>),
    Pair(Box<Tree>, Option<Box<Tree>>),
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Order {
    id: u64,
    customer: String,
    lines: Vec<(u32, i128, Vec<u8>)>,
    note: Option<String>,
    tags: BTreeMap<String, Kind>,
    kinds: Vec<Kind>,
    flag: bool,
    ch: char,
}

pub fn run(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let parsed = TypedBody::parse(data);
    assert_eq!(
        postbox::is_typed_body(data),
        data.starts_with(&postbox::TYPED_BODY_MAGIC)
    );
    if let Ok(t) = parsed {
        assert_eq!(
            postbox::wrap_typed_body(t.codec(), t.payload()).as_deref(),
            Ok(data)
        );
    }
    for codec in [CODEC_JSON, CODEC_BINCODE, 0, 200] {
        let _ = TypedBody::parse_as(data, codec);
    }
    let _ = postbox::decode_typed_body::<Order>(data);
    let _ = postbox::decode_typed_body::<Vec<String>>(data);
    let _ = postbox::decode_typed_body::<serde_json::Value>(data);
    // The same bytes as the payload of each codec.
    for codec in [CODEC_JSON, CODEC_BINCODE] {
        if let Ok(body) = postbox::wrap_typed_body(codec, data) {
            let _ = postbox::decode_typed_body::<Order>(&body);
            let _ = postbox::decode_typed_body::<Vec<Vec<u64>>>(&body);
        }
    }
    // A typed queue's body (bincode without the envelope); a value must re-encode to the input.
    let _ = postbox::fuzzing::typed_queue_body::<Vec<Vec<u64>>>(data);
    let _ = postbox::fuzzing::typed_queue_body::<BTreeMap<String, Vec<u8>>>(data);
    let _ = postbox::fuzzing::typed_queue_body::<Order>(data);
    let _ = postbox::fuzzing::typed_queue_body::<Tree>(data);
    let _ = postbox::decode_typed_body::<Tree>(data);
}
