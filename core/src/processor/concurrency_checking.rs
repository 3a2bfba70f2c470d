//! Concurrency checks of a processor's shutdown: the real `Gate` (the state, its condition
//! variable and the in-flight count that workers, background threads and `join` share) under
//! shuttle's schedulers, with workers that drive it as `worker::run` does but handle no store
//! (see docs/design.md § Concurrency checking).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Gate;
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::sync::{check, thread};

/// What the handlers did, as the check sees it.
#[derive(Default)]
struct Log {
    running: AtomicUsize,
    shut_down: AtomicBool,
}

/// A worker's life as `worker::run` and `Worker::main_loop` lead it: until stopped, take a
/// message, have its handler admitted, run it, end the run; then leave.
fn work(gate: &Gate, log: &Log, messages: u64) {
    for token in 0..messages {
        if gate.is_stopping() {
            break;
        }
        if !gate.begin(token, None) {
            break;
        }
        log.running.fetch_add(1, Ordering::SeqCst);
        assert!(
            !log.shut_down.load(Ordering::SeqCst),
            "a handler started after shutdown returned"
        );
        thread::yield_now();
        log.running.fetch_sub(1, Ordering::SeqCst);
        gate.end(token);
    }
    gate.worker_exited(false);
}

fn add_worker(gate: &Arc<Gate>, log: &Arc<Log>) {
    let (g, l) = (gate.clone(), log.clone());
    gate.add_worker(|| thread::Builder::new().spawn(move || work(&g, &l, 3)))
        .expect("a worker starts");
}

/// Workers run handlers while a watchdog-shaped background thread waits for the last of them
/// and an autoscaler-shaped thread adds a worker as `stop` comes. Shutdown (stop, then join)
/// returns only when every handler has ended and every thread has exited, the in-flight count
/// never goes below zero (the decrement would panic), and no handler starts afterwards.
#[test]
fn shutdown_waits_for_every_handler_and_admits_none_after() {
    check(|| {
        let gate = Arc::new(Gate::new(2));
        let log = Arc::new(Log::default());
        add_worker(&gate, &log);
        add_worker(&gate, &log);
        let g = gate.clone();
        gate.add_background(|| {
            thread::Builder::new().spawn(move || {
                // The watchdog's exit condition, on the processor's condition variable.
                let mut st = g.state.lock();
                while !(st.stopping && st.live == 0) {
                    g.cv.wait(&mut st);
                }
                drop(st);
                g.background_exited();
            })
        })
        .expect("a background thread starts");
        let scaler = {
            let (g, l) = (gate.clone(), log.clone());
            thread::spawn(move || add_worker(&g, &l))
        };
        gate.stop();
        // A join with a deadline may end early; what it reports must hold then too.
        let (finished, still_running) = gate.wait_idle(
            Instant::now().checked_add(Duration::from_millis(1)),
            false,
            None,
        );
        if finished {
            assert_eq!(still_running, 0, "finished with handlers in flight");
            assert_eq!(log.running.load(Ordering::SeqCst), 0);
        }
        let (finished, still_running) = gate.wait_idle(None, false, None);
        assert!(finished, "an untimed join waits until everything exited");
        assert_eq!(still_running, 0);
        assert_eq!(
            log.running.load(Ordering::SeqCst),
            0,
            "a handler still runs"
        );
        log.shut_down.store(true, Ordering::SeqCst);
        assert!(!gate.begin(99, None), "a handler admitted after shutdown");
        scaler.join().expect("scaler");
        let st = gate.state.lock();
        assert_eq!((st.in_flight, st.live, st.background), (0, 0, 0));
    });
}
