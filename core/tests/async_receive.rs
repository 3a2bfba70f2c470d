//! Async receives: `Queue::receive_async`, `Queue::stream`, and the blocking iterators
//! `Queue::iter` / `Queue::try_iter`.
//!
//! The futures are driven by tokio, by `futures::executor` and by a hand-written executor that
//! counts its polls: they depend on no runtime and are woken by the store, not polled on a
//! timer.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use futures::StreamExt;
use postbox::{Durability, Error, Queue, Store};

fn store(dir: &tempfile::TempDir, multi: bool) -> Store {
    let b = Store::builder().multi_process(multi);
    let b = if multi {
        b
    } else {
        b.durability(Durability::None)
    };
    b.open(dir.path().join("s")).unwrap()
}

/// A waker that unparks the executor's thread and counts its wakes.
struct ThreadWaker {
    thread: Thread,
    wakes: AtomicUsize,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// The smallest executor: polls `fut` on this thread, parks between polls (with no timeout:
/// only a wake gets it going again). Returns the output and the number of polls.
fn run_counting<F: Future>(fut: F) -> (F::Output, usize) {
    run_counting_after(fut, None::<fn()>)
}

/// As [`run_counting`], calling `after_first_poll` once the first poll returned `Pending`
/// (failing the test if it did not).
fn run_counting_after<F: Future>(
    fut: F,
    mut after_first_poll: Option<impl FnOnce()>,
) -> (F::Output, usize) {
    let waker = Arc::new(ThreadWaker {
        thread: std::thread::current(),
        wakes: AtomicUsize::new(0),
    });
    let w = Waker::from(waker.clone());
    let mut cx = Context::from_waker(&w);
    let mut fut = pin!(fut);
    let mut polls = 0;
    loop {
        polls += 1;
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            assert!(after_first_poll.is_none(), "the first poll was ready");
            return (v, polls);
        }
        let seen = waker.wakes.load(Ordering::SeqCst);
        if let Some(f) = after_first_poll.take() {
            f();
        }
        while waker.wakes.load(Ordering::SeqCst) == seen {
            std::thread::park();
        }
    }
}

fn send_later(q: &Queue, after: Duration, body: &'static str) -> std::thread::JoinHandle<()> {
    let q = q.clone();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        q.send(body).unwrap();
    })
}

#[test]
fn a_later_send_wakes_the_future_on_a_plain_executor_without_polling() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, false);
    let q = s.queue("q").unwrap();
    let sender = send_later(&q, Duration::from_millis(300), "late");
    let started = Instant::now();
    let (got, polls) = run_counting(q.receive_async(None));
    let msg = got.unwrap().expect("a message");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(msg.body(), b"late");
    assert_eq!(msg.delivery_count(), 1);
    // Parked once, woken once by the send that served it: not a timer loop.
    assert!(polls <= 3, "polled {polls} times");
    msg.complete().unwrap();
    sender.join().unwrap();
    assert_eq!(q.stats().unwrap().locked, 0);
}

#[test]
fn futures_executor_block_on_receives_and_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, false);
    let q = s.queue("q").unwrap();
    let sender = send_later(&q, Duration::from_millis(50), "x");
    let msg = futures::executor::block_on(q.receive_async(Some(Duration::from_secs(30))))
        .unwrap()
        .expect("a message");
    assert_eq!(msg.body(), b"x");
    msg.complete().unwrap();
    sender.join().unwrap();

    let started = Instant::now();
    let (got, polls) = run_counting(q.receive_async(Some(Duration::from_millis(200))));
    assert!(got.unwrap().is_none());
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(polls <= 3, "polled {polls} times");
}

#[tokio::test]
async fn a_timeout_resolves_to_none_and_zero_tries_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, false);
    let q = s.queue("q").unwrap();
    let started = Instant::now();
    assert!(
        q.receive_async(Some(Duration::from_millis(100)))
            .await
            .unwrap()
            .is_none()
    );
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert!(
        q.receive_async(Some(Duration::ZERO))
            .await
            .unwrap()
            .is_none()
    );
    q.send("now").unwrap();
    let msg = q
        .receive_async(Some(Duration::ZERO))
        .await
        .unwrap()
        .expect("a zero timeout tries once");
    msg.complete().unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn many_concurrent_futures_on_one_thread_get_distinct_messages() {
    const N: usize = 150;
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, false);
    let q = s.queue("q").unwrap();
    let tasks: Vec<_> = (0..N)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let msg = q
                    .receive_async(Some(Duration::from_secs(60)))
                    .await
                    .unwrap()
                    .expect("a message");
                let id = msg.id();
                assert_eq!(msg.delivery_count(), 1);
                msg.complete().unwrap();
                id
            })
        })
        .collect();
    // Let every task park its receive first.
    tokio::task::yield_now().await;
    let sender = {
        let q = q.clone();
        std::thread::spawn(move || {
            for i in 0..N {
                q.send(format!("m{i}")).unwrap();
            }
        })
    };
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    sender.join().unwrap();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), N, "every future got its own message");
    let st = q.stats().unwrap();
    assert_eq!((st.active, st.locked), (0, 0));
}

#[tokio::test]
async fn dropping_a_waiting_future_leaves_the_message_for_the_next_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, false);
    let q = s.queue("q").unwrap();
    // Parked, then dropped (a `select!` that took the other branch).
    tokio::select! {
        _ = q.receive_async(None) => panic!("nothing was sent"),
        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
    }
    q.send("for the next").unwrap();
    let st = q.stats().unwrap();
    assert_eq!(
        (st.active, st.locked),
        (1, 0),
        "the dropped future took nothing"
    );
    let msg = q
        .receive_async(Some(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("the message");
    assert_eq!(msg.delivery_count(), 1);
    msg.complete().unwrap();
}

/// The store locked a message for the future (the send's commit served its parked receive),
/// and the future is dropped without being polled again: the message goes back, uncounted.
#[test]
fn dropping_a_future_whose_message_was_locked_for_it_gives_it_back_uncounted() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, false);
    let q = s.queue("q").unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut fut = Box::pin(q.receive_async(None));
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    // Wait until the writer has the request parked, so the send serves it.
    let deadline = Instant::now() + Duration::from_secs(10);
    q.send("served to the future").unwrap();
    while q.stats().unwrap().locked == 0 {
        assert!(Instant::now() < deadline, "the parked receive was served");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(fut);
    let msg = q
        .receive(Duration::from_secs(10))
        .unwrap()
        .expect("given back");
    assert_eq!(
        msg.delivery_count(),
        1,
        "the undelivered lock is not counted"
    );
    msg.complete().unwrap();
    let st = q.stats().unwrap();
    assert_eq!((st.active, st.locked), (0, 0));
}

/// The drop races the delivery: whichever wins, the message is received once, or goes back
/// to the queue with its delivery uncounted.
#[test]
fn dropping_a_future_as_its_message_arrives_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, false);
    let q = s.queue("q").unwrap();
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    let (mut delivered, mut returned) = (0, 0);
    for i in 0..300u64 {
        let mut fut = Box::pin(q.receive_async(None));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        let sender = {
            let q = q.clone();
            std::thread::spawn(move || q.send(format!("m{i}")).unwrap())
        };
        for _ in 0..(i % 7) * 50 {
            std::hint::spin_loop();
        }
        let got = match fut.as_mut().poll(&mut cx) {
            Poll::Ready(got) => Some(got.unwrap().expect("a message")),
            Poll::Pending => {
                drop(fut);
                None
            }
        };
        sender.join().unwrap();
        if let Some(msg) = got {
            assert_eq!(msg.delivery_count(), 1);
            msg.complete().unwrap();
            delivered += 1;
        } else {
            // Taken back by a detached commit if the drop came late: wait for it.
            let msg = q
                .receive(Duration::from_secs(10))
                .unwrap()
                .expect("not lost");
            assert_eq!(
                msg.delivery_count(),
                1,
                "the dropped future's delivery is uncounted"
            );
            msg.complete().unwrap();
            returned += 1;
        }
        let st = q.stats().unwrap();
        assert_eq!((st.active, st.locked), (0, 0), "round {i}");
    }
    assert_eq!(delivered + returned, 300);
    eprintln!("{delivered} received by the future, {returned} after its drop");
}

#[tokio::test]
async fn the_stream_yields_messages_in_order_and_ends_after_closed() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, false);
    let q = s.queue("q").unwrap();
    q.send_batch((0..5).map(|i| format!("m{i}"))).unwrap();
    let later = {
        let q = q.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            q.send_batch((5..10).map(|i| format!("m{i}"))).unwrap();
        })
    };
    let mut messages = q.stream();
    for i in 0..10 {
        let msg = messages.next().await.expect("endless").unwrap();
        assert_eq!(msg.body(), format!("m{i}").as_bytes());
        msg.complete().unwrap();
    }
    later.await.unwrap();
    let closer = {
        let s = s.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            s.close().unwrap();
        })
    };
    assert!(matches!(messages.next().await, Some(Err(Error::Closed))));
    assert!(messages.next().await.is_none());
    closer.join().unwrap();
}

#[test]
fn iter_blocks_for_each_message_and_ends_after_closed() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, false);
    let q = s.queue("q").unwrap();
    q.send_batch(["a", "b"]).unwrap();
    let sender = send_later(&q, Duration::from_millis(50), "c");
    let mut it = q.iter();
    for want in ["a", "b", "c"] {
        let msg = it.next().expect("blocks").unwrap();
        assert_eq!(msg.body(), want.as_bytes());
        msg.complete().unwrap();
    }
    sender.join().unwrap();
    let closer = {
        let s = s.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            s.close().unwrap();
        })
    };
    assert!(matches!(it.next(), Some(Err(Error::Closed))));
    assert!(it.next().is_none());
    closer.join().unwrap();
}

#[test]
fn try_iter_takes_what_is_receivable_now_and_ends() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, false);
    let q = s.queue("q").unwrap();
    assert_eq!(q.try_iter().count(), 0);
    q.send_batch(["a", "b", "c"]).unwrap();
    let held: Vec<_> = q.try_iter().collect::<postbox::Result<_>>().unwrap();
    let bodies: Vec<_> = held.iter().map(|m| m.body().to_vec()).collect();
    assert_eq!(bodies, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(q.stats().unwrap().locked, 3);
    q.complete_batch(held).unwrap();
    assert_eq!(q.try_iter().count(), 0);
    s.delete_queue("q").unwrap();
    let mut it = q.try_iter();
    assert!(matches!(it.next(), Some(Err(Error::QueueNotFound(_)))));
    assert!(it.next().is_none());
}

#[test]
fn a_waiting_future_ends_with_closed_when_the_store_closes() {
    for multi in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir, multi);
        let q = s.queue("q").unwrap();
        let closer = {
            let s = s.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                s.close().unwrap();
            })
        };
        let got = futures::executor::block_on(q.receive_async(None));
        assert!(matches!(got, Err(Error::Closed)), "multi {multi}: {got:?}");
        closer.join().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_process_store_wakes_times_out_and_streams() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, true);
    let q = s.queue("q").unwrap();

    // Woken by a send of another thread.
    let sender = send_later(&q, Duration::from_millis(100), "shared");
    let msg = q
        .receive_async(Some(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(msg.body(), b"shared");
    msg.complete().unwrap();
    sender.join().unwrap();

    // A timeout.
    let started = Instant::now();
    assert!(
        q.receive_async(Some(Duration::from_millis(150)))
            .await
            .unwrap()
            .is_none()
    );
    assert!(started.elapsed() >= Duration::from_millis(150));

    // Concurrent futures get distinct messages; the stream keeps order.
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let m = q
                    .receive_async(Some(Duration::from_secs(60)))
                    .await
                    .unwrap()
                    .expect("a message");
                let id = m.id();
                m.complete().unwrap();
                id
            })
        })
        .collect();
    q.send_batch((0..20).map(|i| format!("c{i}"))).unwrap();
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 20);

    q.send_batch(["s0", "s1", "s2"]).unwrap();
    let mut messages = q.stream();
    for want in ["s0", "s1", "s2"] {
        let m = messages.next().await.expect("endless").unwrap();
        assert_eq!(m.body(), want.as_bytes());
        m.complete().unwrap();
    }
    assert_eq!(q.stats().unwrap().locked, 0);
}

#[test]
fn a_multi_process_wait_is_woken_not_spun() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, true);
    let q = s.queue("q").unwrap();
    let sender = send_later(&q, Duration::from_millis(300), "late");
    let (got, polls) = run_counting(q.receive_async(None));
    let msg = got.unwrap().expect("a message");
    msg.complete().unwrap();
    sender.join().unwrap();
    // Polls of the file with backoff up to the 50 ms ceiling: a handful, not hundreds.
    assert!(polls < 40, "polled {polls} times");
}

/// Another handle's send — another process's, as far as the waiter can tell — wakes a future
/// waiting on a shared store through the file watch (inotify on Linux, a directory change
/// notification on Windows), not at its next poll of the file, which is ten minutes away.
#[cfg(any(target_os = "linux", windows))]
#[test]
fn another_handles_send_wakes_a_shared_store_future_through_the_file_watch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let open = || {
        Store::builder()
            .multi_process(true)
            .poll_interval(Duration::from_secs(600), Duration::from_secs(600))
            .open(&path)
            .unwrap()
    };
    let (a, b) = (open(), open());
    let (qa, qb) = (a.queue("q").unwrap(), b.queue("q").unwrap());
    let started = Instant::now();
    let send = || {
        qb.send("across").unwrap();
    };
    let (got, _) = run_counting_after(qa.receive_async(Some(Duration::from_secs(120))), Some(send));
    let msg = got
        .unwrap()
        .expect("woken by the watch, long before the poll");
    assert_eq!(msg.body(), b"across");
    assert!(started.elapsed() < Duration::from_secs(120));
    msg.complete().unwrap();
    a.close().unwrap();
    b.close().unwrap();
}
