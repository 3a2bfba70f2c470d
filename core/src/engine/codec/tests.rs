#[test]
fn a_record_read_under_another_key_is_refused() {
    let env = encode_envelope(7, &Properties::default(), None, b"body");
    assert!(decode_envelope(7, &env).is_ok());
    assert!(decode_envelope(6, &env).is_err());
    let rec = QueueRecord {
        temporary_owner: 0,
        id: 1,
        kind: QueueKind::Normal,
        peer: 2,
        options: QueueSettings::default(),
        subscription: None,
        journal: 0,
    };
    let q = encode_queue("q", &rec);
    assert!(decode_queue("q", &q).is_ok());
    assert!(decode_queue("p", &q).is_err());
    let st = crate::engine::tables::State {
        queue: 1,
        priority: 3,
        status: crate::engine::tables::Status::Ready,
        deferred: false,
        session: false,
        tracked: false,
        checkpointed: false,
        delivery_count: 0,
        size: 4,
        enqueued_at: 1,
        visible_at: 0,
        expires_at: 0,
        lock_owner: 0,
        lock_token: 0,
        locked_until: 0,
    };
    let row = st.encode(7);
    assert!(crate::engine::tables::State::decode(7, &row).is_ok());
    assert!(crate::engine::tables::State::decode(6, &row).is_err());
}

use super::*;

/// The format-1 encoding of a record encoded in format 2: format byte 1, no checksum.
fn as_v1(v2: &[u8]) -> Vec<u8> {
    let mut v1 = vec![1];
    v1.extend_from_slice(&v2[V2_HEADER..]);
    v1
}

fn full_props() -> Properties {
    let mut props = Properties {
        label: Some("label".into()),
        content_type: Some("application/json".into()),
        correlation_id: Some("corr".into()),
        reply_to: Some("replies".into()),
        message_key: Some("key".into()),
        group: Some("g".into()),
        sequence: Some(300),
        ..Properties::default()
    };
    props
        .user
        .insert("a".into(), PropertyValue::Bytes(vec![0, 1, 255]));
    props
        .user
        .insert("b".into(), PropertyValue::String("é".into()));
    props
}

fn sample_queue() -> QueueRecord {
    QueueRecord {
        temporary_owner: 0,
        id: 3,
        kind: QueueKind::DeadLetter,
        peer: 2,
        options: QueueSettings {
            max_messages: Some(0),
            max_bytes: Some(10),
            default_ttl: Some(Duration::from_secs(5)),
            dedup_window: Some(Duration::from_secs(60)),
            ..QueueSettings::default()
        },
        subscription: None,
        journal: 0,
    }
}

#[test]
fn envelope_round_trips() {
    let mut props = Properties {
        label: Some("l".into()),
        group: Some("g".into()),
        sequence: Some(300),
        ..Properties::default()
    };
    props
        .user
        .insert("a".into(), PropertyValue::Bytes(vec![0, 1, 255]));
    props
        .user
        .insert("b".into(), PropertyValue::String("é".into()));
    let dl = DeadLetter {
        reason: "r".into(),
        description: "d".into(),
        source_queue: 7,
        at_ms: 12345,
    };
    let buf = encode_envelope(7, &props, Some(&dl), b"body");
    let back = decode_envelope(7, &buf).unwrap();
    assert_eq!(back.props, props);
    assert_eq!(back.dead_letter, Some(dl));
    assert_eq!(back.body, b"body");
}

#[test]
fn truncated_envelopes_are_errors_not_panics() {
    let buf = encode_envelope(
        7,
        &Properties {
            label: Some("label".into()),
            ..Properties::default()
        },
        None,
        b"",
    );
    for len in 0..buf.len() - 1 {
        assert!(decode_envelope(7, &buf[..len]).is_err(), "len {len}");
    }
}

#[test]
fn queue_record_round_trips() {
    let rec = sample_queue();
    assert_eq!(decode_queue("q", &encode_queue("q", &rec)).unwrap(), rec);
    for filter in [
        crate::filter::Filter::All,
        crate::filter::Filter::correlation()
            .label("l")
            .correlation_id("c")
            .content_type("t")
            .reply_to("r")
            .group("g")
            .property("s", "v")
            .property("b", vec![0u8, 255]),
    ] {
        let sub = QueueRecord {
            kind: QueueKind::Normal,
            subscription: Some(Subscription { topic: 9, filter }),
            journal: 12,
            ..sample_queue()
        };
        assert_eq!(decode_queue("q", &encode_queue("q", &sub)).unwrap(), sub);
    }
}

#[test]
fn unknown_extension_fields_are_skipped() {
    let rec = sample_queue();
    let mut raw = encode_queue("q", &rec);
    // A field a later version might add: tag 77, two bytes of payload, then re-sealed.
    raw.extend_from_slice(&[77, 2, 0xAB, 0xCD]);
    let resealed = {
        let mut w = Writer(raw);
        w.0[1..V2_HEADER].fill(0);
        w.seal(b"q")
    };
    assert_eq!(decode_queue("q", &resealed).unwrap(), rec);
}

#[test]
fn new_records_are_format_2() {
    let env = encode_envelope(7, &full_props(), None, b"body");
    assert_eq!(env[0], ENVELOPE_V2);
    assert_eq!(encode_queue("q", &sample_queue())[0], QUEUE_V2);
}

#[test]
fn format_1_records_still_decode() {
    let props = full_props();
    let dl = DeadLetter {
        reason: "r".into(),
        description: "d".into(),
        source_queue: 7,
        at_ms: 12345,
    };
    let v1 = as_v1(&encode_envelope(7, &props, Some(&dl), b"old body"));
    let back = decode_envelope(7, &v1).unwrap();
    assert_eq!(back.props, props);
    assert_eq!(back.dead_letter, Some(dl));
    assert_eq!(back.body, b"old body");
    let rec = sample_queue();
    assert_eq!(
        decode_queue("q", &as_v1(&encode_queue("q", &rec))).unwrap(),
        rec
    );
}

#[test]
fn only_flipping_all_eight_bits_turns_a_v2_format_byte_into_v1() {
    assert_eq!((ENVELOPE_V2 ^ ENVELOPE_V1).count_ones(), 8);
    assert_eq!((QUEUE_V2 ^ QUEUE_V1).count_ones(), 8);
}

/// Flips every bit of `buf` in turn; `decode` must reject each damaged copy.
fn assert_every_flip_detected(buf: &mut [u8], decode: impl Fn(&[u8]) -> bool) {
    for bit in 0..buf.len() * 8 {
        buf[bit / 8] ^= 1 << (bit % 8);
        assert!(
            !decode(buf),
            "flip of bit {bit} of {} went unnoticed",
            buf.len()
        );
        buf[bit / 8] ^= 1 << (bit % 8);
    }
    assert!(decode(buf), "the undamaged record decodes");
}

#[test]
fn every_single_bit_flip_of_a_v2_envelope_is_detected() {
    let dl = DeadLetter {
        reason: "MaxDeliveriesExceeded".into(),
        description: "tried 10 times".into(),
        source_queue: 7,
        at_ms: 1_700_000_000_000,
    };
    let body: Vec<u8> = (0..4096u32).map(|i| (i * 31 % 251) as u8).collect();
    for (props, dl, body) in [
        (Properties::default(), None, &[][..]),
        (full_props(), Some(&dl), &b"short"[..]),
        (full_props(), None, &body[..]),
    ] {
        let mut buf = encode_envelope(7, &props, dl, body);
        assert_every_flip_detected(&mut buf, |b| decode_envelope(7, b).is_ok());
    }
}

#[test]
fn every_single_bit_flip_of_a_v2_queue_record_is_detected() {
    for rec in [
        sample_queue(),
        QueueRecord {
            temporary_owner: 0,
            id: 1,
            kind: QueueKind::Normal,
            peer: 2,
            options: QueueSettings::default(),
            subscription: None,
            journal: 0,
        },
    ] {
        let mut buf = encode_queue("q", &rec);
        assert_every_flip_detected(&mut buf, |b| decode_queue("q", b).is_ok());
    }
}

#[test]
fn every_double_bit_flip_of_a_v2_queue_record_is_detected() {
    let buf = encode_queue("q", &sample_queue());
    let bits = buf.len() * 8;
    for i in 0..bits {
        for j in i + 1..bits {
            let mut d = buf.clone();
            d[i / 8] ^= 1 << (i % 8);
            d[j / 8] ^= 1 << (j % 8);
            assert!(
                decode_queue("q", &d).is_err(),
                "flip of bits {i}, {j} went unnoticed"
            );
        }
    }
}

#[test]
fn truncated_v1_envelopes_are_errors_not_panics() {
    let buf = as_v1(&encode_envelope(7, &full_props(), None, b""));
    for len in 0..buf.len() - 1 {
        assert!(decode_envelope(7, &buf[..len]).is_err(), "len {len}");
    }
}

#[test]
fn default_priority_is_stored_only_when_changed() {
    let mut rec = sample_queue();
    let plain = encode_queue("q", &rec);
    rec.options.default_priority = 6;
    let with = encode_queue("q", &rec);
    assert!(with.len() > plain.len());
    assert_eq!(
        decode_queue("q", &with).unwrap().options.default_priority,
        6
    );
    assert_eq!(
        decode_queue("q", &plain).unwrap().options.default_priority,
        crate::message::DEFAULT_PRIORITY
    );
}
