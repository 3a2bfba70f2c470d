//! A body that nests deeper than any sane value must be a decode error, not a stack overflow:
//! bincode has no depth limit of its own, and a recursive type decodes a level per byte, so a
//! 100 KiB body aborted the receiving process (found by probing the typed-body fuzz target).

use postbox::{CODEC_BINCODE, ErrorKind, decode_typed_body, wrap_typed_body};
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Tree {
    Leaf,
    Node(Box<Tree>),
}

fn nested(depth: usize) -> Tree {
    (0..depth).fold(Tree::Leaf, |t, _| Tree::Node(Box::new(t)))
}

#[test]
fn a_body_nested_past_the_limit_is_a_codec_error() {
    // Variant 1 (Node) over and over: one level per byte.
    let deep = vec![1u8; 1 << 20];
    let typed = wrap_typed_body(CODEC_BINCODE, &deep).unwrap();
    let e = decode_typed_body::<Tree>(&typed).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Codec, "{e}");
    // A body without the envelope is decoded as bincode too.
    let e = decode_typed_body::<Tree>(&deep).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Codec, "{e}");
}

#[test]
fn values_within_the_limit_still_decode() {
    let mut payload = vec![1u8; 100];
    payload.push(0);
    let typed = wrap_typed_body(CODEC_BINCODE, &payload).unwrap();
    assert_eq!(decode_typed_body::<Tree>(&typed).unwrap(), nested(100));
}
