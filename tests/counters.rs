//! Atomic counters in application tables across processes: two processes of eight threads each
//! increment one row of a shared (`multi_process`) store, on their own (`Table::increment`) and
//! in transactions (`TxTable::increment`, run again after a conflict). No increment is lost and
//! no value is handed out twice.

use std::collections::BTreeSet;

use postbox::Store;
use postbox_tests::{Proc, arg, env_u64, num};

const CHILD: &str = env!("CARGO_BIN_EXE_pbx-child");

/// Runs `processes` children counting `per_thread` times on `threads` threads each, in `mode`;
/// returns every value the increments returned and the conflicts met.
fn count_in_processes(
    path: &std::path::Path,
    table: &str,
    processes: usize,
    threads: u64,
    per_thread: u64,
    mode: &str,
) -> (Vec<u64>, u64) {
    let (threads, per_thread) = (threads.to_string(), per_thread.to_string());
    let mut procs: Vec<Proc> = (0..processes)
        .map(|p| {
            Proc::spawn(
                CHILD,
                &format!("{mode}{p}"),
                &["count", arg(path), table, &threads, &per_thread, mode],
            )
        })
        .collect();
    // Every child has the store open before any starts counting.
    for p in &mut procs {
        p.expect("READY");
    }
    for p in &mut procs {
        p.close_stdin();
    }
    let (mut values, mut conflicts) = (Vec::new(), 0);
    for p in procs {
        for line in p.finish() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["VALUE", v] => values.push(num(v)),
                ["CONFLICTS", n] => conflicts += num(n),
                ["END"] => {}
                other => panic!("unexpected line {other:?}"),
            }
        }
    }
    (values, conflicts)
}

/// The count: 8 threads x 1,000 increments in each of two processes end at exactly
/// 16,000, and the values returned are 1 to 16,000, each once.
#[test]
fn two_processes_of_eight_threads_count_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.postbox");
    let per_thread = env_u64("POSTBOX_COUNTER_INCREMENTS", 1000);
    let store = Store::builder().multi_process(true).open(&path).unwrap();
    let (values, _) = count_in_processes(&path, "auto", 2, 8, per_thread, "auto");
    let total = 2 * 8 * per_thread;
    let row = store.table("auto").unwrap().get(b"n").unwrap();
    assert_eq!(row, Some(total.to_string().into_bytes()));
    let distinct: BTreeSet<u64> = values.iter().copied().collect();
    assert_eq!(values.len() as u64, total);
    assert_eq!(distinct, (1..=total).collect::<BTreeSet<u64>>());
}

/// The same in transactions: each increment's commit is refused when another commit changed the
/// row after the transaction read it, and the transaction runs again; what commits is exact.
#[test]
fn two_processes_count_exactly_in_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.postbox");
    let per_thread = env_u64("POSTBOX_COUNTER_TX_INCREMENTS", 100);
    let store = Store::builder().multi_process(true).open(&path).unwrap();
    let (values, conflicts) = count_in_processes(&path, "tx", 2, 8, per_thread, "tx");
    let total = 2 * 8 * per_thread;
    let row = store.table("tx").unwrap().get(b"n").unwrap();
    assert_eq!(row, Some(total.to_string().into_bytes()));
    let distinct: BTreeSet<u64> = values.iter().copied().collect();
    assert_eq!(distinct, (1..=total).collect::<BTreeSet<u64>>());
    assert_eq!(values.len() as u64, total);
    eprintln!("{total} transactional increments, {conflicts} conflicts");
}
