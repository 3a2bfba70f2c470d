//! The typed-body envelope (docs/typed-bodies.md): header round trips, refusals, JSON typed
//! queues, legacy bincode bodies, and `DecodeFailed` dead letters on the first delivery.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use postbox::{
    Bincode, BodyCodec, CODEC_BINCODE, CODEC_JSON, CODEC_PICKLE, Error, ErrorKind,
    FIRST_USER_CODEC, Json, Message, REASON_DECODE_FAILED, Store, TYPED_BODY_HEADER_LEN,
    TYPED_BODY_MAGIC, TYPED_BODY_VERSION, TypedBody, TypedBodyError, decode_typed_body,
    is_typed_body, wrap_typed_body,
};
use serde::{Deserialize, Serialize};

/// The value of the cross-language example (core/examples/typed_json_producer.rs, the C and
/// Python tests).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    item: String,
    quantity: u32,
    tags: Vec<String>,
    gift_note: Option<String>,
    price: f64,
}

fn order(id: u64) -> Order {
    Order {
        id,
        item: "thé vert".into(),
        quantity: 3,
        tags: vec!["loose".into(), "organic".into()],
        gift_note: None,
        price: 4.5,
    }
}

/// The JSON typed body of `order(42)`, byte for byte; the C and Python tests hold the same
/// bytes, so the three languages agree on them.
const ORDER_42_JSON: &[u8] = b"\xFFPBT\x01\x01{\"id\":42,\"item\":\"th\xC3\xA9 vert\",\"quantity\":3,\"tags\":[\"loose\",\"organic\"],\"gift_note\":null,\"price\":4.5}";

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("t.postbox")).unwrap();
    (dir, store)
}

#[test]
fn the_header_round_trips_for_every_assigned_codec() {
    assert_eq!(TYPED_BODY_MAGIC, [0xFF, b'P', b'B', b'T']);
    assert_eq!((TYPED_BODY_VERSION, TYPED_BODY_HEADER_LEN), (1, 6));
    let big = vec![0xA5; 100_000];
    for codec in [
        CODEC_JSON,
        CODEC_BINCODE,
        CODEC_PICKLE,
        FIRST_USER_CODEC,
        200,
        255,
    ] {
        for payload in [&b""[..], b"x", &big] {
            let body = wrap_typed_body(codec, payload).unwrap();
            assert_eq!(body.len(), TYPED_BODY_HEADER_LEN + payload.len());
            assert_eq!(body[..6], [0xFF, b'P', b'B', b'T', 1, codec]);
            assert!(is_typed_body(&body));
            let typed = TypedBody::parse(&body).unwrap();
            assert_eq!((typed.codec(), typed.payload()), (codec, payload));
            // No copy: the payload is a view into the body.
            assert_eq!(typed.payload().as_ptr(), body[6..].as_ptr());
            assert_eq!(TypedBody::parse_as(&body, codec).unwrap(), typed);
        }
    }
}

#[test]
fn reserved_codecs_unknown_versions_and_stray_bytes_are_refused() {
    for codec in [0, 4, 5, 64, 127] {
        assert_eq!(
            wrap_typed_body(codec, b"{}"),
            Err(TypedBodyError::ReservedCodec(codec))
        );
        let mut body = wrap_typed_body(CODEC_JSON, b"{}").unwrap();
        body[5] = codec;
        assert_eq!(
            TypedBody::parse(&body),
            Err(TypedBodyError::ReservedCodec(codec))
        );
        assert_eq!(
            TypedBody::parse_as(&wrap_typed_body(CODEC_JSON, b"{}").unwrap(), codec),
            Err(TypedBodyError::ReservedCodec(codec))
        );
    }
    for version in [0, 2, 255] {
        let mut body = wrap_typed_body(CODEC_JSON, b"{}").unwrap();
        body[4] = version;
        assert_eq!(
            TypedBody::parse(&body),
            Err(TypedBodyError::UnsupportedVersion(version))
        );
        let e = decode_typed_body::<BTreeMap<String, u8>>(&body).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Codec);
        assert!(e.to_string().contains("version"), "{e}");
    }
    for not_typed in [
        &b""[..],
        b"{}",
        b"\xFF",
        b"\xFFPB",
        b"\xFFPBX\x01\x01",
        b"plain text",
    ] {
        assert_eq!(
            TypedBody::parse(not_typed),
            Err(TypedBodyError::NotTypedBody)
        );
        assert!(!is_typed_body(not_typed));
    }
    for truncated in [&b"\xFFPBT"[..], b"\xFFPBT\x01"] {
        assert_eq!(
            TypedBody::parse(truncated),
            Err(TypedBodyError::Truncated {
                len: truncated.len()
            })
        );
    }
    let json = wrap_typed_body(CODEC_JSON, b"1").unwrap();
    assert_eq!(
        TypedBody::parse_as(&json, CODEC_PICKLE),
        Err(TypedBodyError::WrongCodec {
            expected: CODEC_PICKLE,
            found: CODEC_JSON
        })
    );
    // Every refusal is a codec error for the rest of the API.
    let e: Error = TypedBodyError::NotTypedBody.into();
    assert_eq!(e.kind(), ErrorKind::Codec);
}

#[test]
fn json_typed_queue_round_trip_with_the_documented_bytes() {
    let (_dir, store) = store();
    let raw = store.queue("orders").unwrap();
    let q = raw.typed_json::<Order>();
    let id = q.send(&order(42)).unwrap();
    assert_eq!(raw.get(id).unwrap().unwrap().body(), ORDER_42_JSON);
    assert_eq!(Json::encode_body(&order(42)).unwrap(), ORDER_42_JSON);
    assert_eq!(Json::ID, CODEC_JSON);

    let got = q.receive(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(got.value(), &order(42));
    assert_eq!(got.delivery_count(), 1);
    got.complete().unwrap();

    // Batches, transactions and messages with properties go through the same codec.
    q.send_batch(&[order(1), order(2)]).unwrap();
    let mut tx = store.begin();
    q.send_in(&mut tx, &order(3)).unwrap();
    tx.commit().unwrap();
    raw.send(q.message(&order(4)).unwrap().label("gift").priority(0))
        .unwrap();
    for want in 1..=4 {
        let got = q.try_receive().unwrap().unwrap();
        assert_eq!(got.value().id, want);
        assert!(is_typed_body(got.body()));
        assert_eq!(TypedBody::parse(got.body()).unwrap().codec(), CODEC_JSON);
        got.complete().unwrap();
    }
    assert!(format!("{q:?}").contains("codec: 1"), "{q:?}");
}

#[test]
fn json_and_bincode_views_read_each_others_bodies() {
    let (_dir, store) = store();
    let raw = store.queue("orders").unwrap();
    let json = raw.typed_json::<Order>();
    let bin = raw.typed::<Order>();
    bin.send(&order(1)).unwrap();
    json.send(&order(2)).unwrap();
    let first = json.try_receive().unwrap().unwrap();
    assert_eq!(
        TypedBody::parse(first.body()).unwrap().codec(),
        CODEC_BINCODE
    );
    assert_eq!(first.value(), &order(1));
    first.complete().unwrap();
    let second = bin.try_receive().unwrap().unwrap();
    assert_eq!(second.value(), &order(2));
    second.complete().unwrap();
    // The explicit form names the codec; `typed` is bincode.
    let explicit = raw.typed_with::<Order, Bincode>();
    assert_eq!(
        Bincode::encode_body(&order(5)).unwrap(),
        explicit.message(&order(5)).unwrap().body()
    );
    assert_eq!(Bincode::ID, CODEC_BINCODE);
}

#[test]
fn legacy_bincode_bodies_still_decode() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Legacy {
        id: u64,
        item: String,
        counts: Vec<u32>,
    }
    // What typed queues wrote before the envelope: bare bincode 2, standard configuration
    // (varints: 42 is one byte, 1000 is 251 then a little-endian u16).
    let legacy = vec![42, 3, b't', b'e', b'a', 2, 1, 251, 0xE8, 0x03];
    let want = Legacy {
        id: 42,
        item: "tea".into(),
        counts: vec![1, 1000],
    };
    assert_eq!(decode_typed_body::<Legacy>(&legacy).unwrap(), want);

    let (_dir, store) = store();
    let raw = store.queue("legacy").unwrap();
    raw.send(legacy.clone()).unwrap();
    raw.send(legacy).unwrap();
    let got = raw.typed_json::<Legacy>().try_receive().unwrap().unwrap();
    assert_eq!(got.value(), &want);
    got.complete().unwrap();
    let got = raw.typed::<Legacy>().try_receive().unwrap().unwrap();
    assert_eq!(got.value(), &want);
    got.complete().unwrap();
    // The same value sent today is enveloped, and decodes to the same.
    let now = Bincode::encode_body(&want).unwrap();
    assert_eq!(now[6..], [42, 3, b't', b'e', b'a', 2, 1, 251, 0xE8, 0x03]);
}

/// Bodies no Rust typed view can read, each with what its error must mention.
fn undecodable() -> Vec<(Vec<u8>, &'static str)> {
    let json = |text: &[u8]| wrap_typed_body(CODEC_JSON, text).unwrap();
    let mut v2 = json(br#"{"id":1}"#);
    v2[4] = 2;
    let mut reserved = json(b"{}");
    reserved[5] = 9;
    vec![
        (json(b"{\"id\":"), "JSON"),                 // cut JSON
        (json(br#"{"id":"not a number"}"#), "JSON"), // wrong shape
        (json(b"\"\xFF\xFE\""), "JSON"),             // not UTF-8
        (json(b"{} {}"), "JSON"),                    // trailing value
        (
            wrap_typed_body(CODEC_PICKLE, b"\x80\x05N.").unwrap(),
            "pickle",
        ),
        (wrap_typed_body(200, b"{}").unwrap(), "user codec"),
        (v2, "version 2"),
        (reserved, "reserved"),
        (b"\xFFPBT\x01".to_vec(), "truncated"),
        (wrap_typed_body(CODEC_BINCODE, &[42, 3, b't']).unwrap(), ""), // cut bincode
        (vec![0xFF; 3], ""),                                           // legacy garbage
    ]
}

#[test]
fn undecodable_bodies_are_dead_lettered_on_their_first_delivery() {
    let (_dir, store) = store();
    let raw = store.queue("orders").unwrap();
    let bodies = undecodable();
    for (body, mention) in &bodies {
        raw.send(body.clone()).unwrap();
        match raw.typed_json::<Order>().try_receive() {
            Err(Error::Codec(text)) => {
                assert!(text.contains(mention), "{text:?} lacks {mention:?}")
            }
            other => panic!("expected a codec error for {body:?}, got {other:?}"),
        }
    }
    let s = raw.stats().unwrap();
    assert_eq!(
        (s.active, s.locked, s.dead_lettered),
        (0, 0, bodies.len() as u64)
    );
    let dead: Vec<_> = raw
        .dead_letters()
        .unwrap()
        .browse()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(dead.len(), bodies.len());
    for (e, (body, _)) in dead.iter().zip(&bodies) {
        let info = e.dead_letter_info().unwrap();
        assert_eq!(info.reason, REASON_DECODE_FAILED);
        assert!(!info.description.is_empty());
        assert_eq!(e.delivery_count(), 1, "dead-lettered on its first delivery");
        assert_eq!(e.body(), &body[..], "the body is kept as it was");
    }
}

#[test]
fn typed_processor_reads_json_and_bincode_and_dead_letters_the_rest() {
    let (_dir, store) = store();
    let raw = store.queue("orders").unwrap();
    raw.typed_json::<Order>().send(&order(1)).unwrap();
    raw.send(wrap_typed_body(CODEC_PICKLE, b"\x80\x05N.").unwrap())
        .unwrap();
    raw.typed::<Order>().send(&order(2)).unwrap();
    let mut v9 = ORDER_42_JSON.to_vec();
    v9[4] = 9;
    raw.send(v9).unwrap();
    raw.send(ORDER_42_JSON.to_vec()).unwrap();
    let (tx, rx) = mpsc::channel();
    let p = raw
        .typed_json::<Order>()
        .processor()
        .workers(1)
        .start_typed(move |_d, o: Order| -> Result<(), String> {
            let _ = tx.send(o.id);
            Ok(())
        })
        .unwrap();
    let mut ids: Vec<u64> = (0..3)
        .map(|_| rx.recv_timeout(Duration::from_secs(20)).unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, vec![1, 2, 42]);
    let report = p.shutdown(Duration::from_secs(20));
    assert_eq!(
        (report.processed, report.dead_lettered),
        (3, 2),
        "{report:?}"
    );
    for e in raw.dead_letters().unwrap().browse() {
        let e = e.unwrap();
        assert_eq!(e.dead_letter_info().unwrap().reason, REASON_DECODE_FAILED);
        assert_eq!(e.delivery_count(), 1);
    }
}

#[test]
fn a_value_json_cannot_hold_is_a_codec_error_and_nothing_is_sent() {
    let (_dir, store) = store();
    let raw = store.queue("maps").unwrap();
    let q = raw.typed_json::<BTreeMap<(u8, u8), u8>>();
    let value: BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into_iter().collect();
    assert!(matches!(q.send(&value), Err(Error::Codec(_))));
    assert!(matches!(
        q.send_batch([&BTreeMap::new(), &value]),
        Err(Error::Codec(_))
    ));
    assert_eq!(raw.stats().unwrap().active, 0);
    // The bincode view holds it.
    raw.typed::<BTreeMap<(u8, u8), u8>>().send(&value).unwrap();
    assert_eq!(
        raw.typed_json::<BTreeMap<(u8, u8), u8>>()
            .try_receive()
            .unwrap()
            .unwrap()
            .value(),
        &value
    );
}

#[test]
fn plain_sends_of_envelopes_are_read_like_typed_sends() {
    // A body a C or Python program wrapped by hand is an ordinary typed body.
    let (_dir, store) = store();
    let raw = store.queue("orders").unwrap();
    let payload = br#"{"id":7,"item":"mint","quantity":1,"tags":[],"price":1}"#;
    raw.send(Message::new(wrap_typed_body(CODEC_JSON, payload).unwrap()))
        .unwrap();
    let got = raw.typed::<Order>().try_receive().unwrap().unwrap();
    let want = Order {
        id: 7,
        item: "mint".into(),
        quantity: 1,
        tags: vec![],
        gift_note: None,
        price: 1.0,
    };
    assert_eq!(got.value(), &want);
}
