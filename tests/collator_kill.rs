//! A collator killed with SIGKILL between two arrivals loses and duplicates nothing: 1, 2, 3, 5
//! and 6 arrive in a child process (1, 2, 3 released at once; 5, 6 held), the child is killed,
//! and 4 — sent after a reopen — releases 4, 5, 6 exactly once, in order.

use postbox::{Message, Store};
use postbox_tests::{Proc, arg};

const CHILD: &str = env!("CARGO_BIN_EXE_pbx-child");

#[test]
fn a_sigkill_between_arrivals_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("collate.postbox");
    let mut child = Proc::spawn(
        CHILD,
        "producer",
        &[
            "collate",
            arg(&path),
            "ordered",
            "ordered-in",
            "s",
            "1",
            "2",
            "3",
            "5",
            "6",
        ],
    );
    child.expect("READY");
    let mut released = Vec::new();
    for _ in 0..5 {
        let words = child.expect("COLLATED");
        released.push((words[0].clone(), words[1].clone()));
    }
    let expected: Vec<(String, String)> =
        [("1", "1"), ("2", "1"), ("3", "1"), ("5", "0"), ("6", "0")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
    assert_eq!(released, expected);
    child.expect("SENT-ALL");
    child.kill9();

    let store = Store::open(&path).unwrap();
    let dest = store.queue("ordered").unwrap();
    let c = store.collator("ordered-in", &dest).unwrap();
    assert_eq!(dest.len().unwrap(), 3);
    assert_eq!(c.held().unwrap(), 2);
    assert_eq!(c.incomplete().unwrap()[0].held, vec![5, 6]);
    // A producer that retries after the crash is recognised.
    assert!(
        c.send(Message::new("s:5").group("s").sequence(5))
            .unwrap()
            .duplicate
    );
    assert_eq!(
        c.send(Message::new("s:4").group("s").sequence(4))
            .unwrap()
            .released
            .len(),
        3
    );
    let mut got = Vec::new();
    while let Some(m) = dest.try_receive().unwrap() {
        got.push(String::from_utf8(m.body().to_vec()).unwrap());
        m.complete().unwrap();
    }
    assert_eq!(got, ["s:1", "s:2", "s:3", "s:4", "s:5", "s:6"]);
    assert_eq!(c.held().unwrap(), 0);
}
