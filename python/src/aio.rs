//! The native half of `postbox.aio`: receives that wait without a thread each.
//!
//! One driver thread per process (started by the first async receive) polls every pending
//! [`ReceiveFuture`]. A future's waker, called by the store when a message may be receivable
//! (docs/design.md § Waiting), queues the task for the driver; the driver polls it and, once it
//! resolves, keeps the result in the task and calls the task's `wake` callable under the GIL.
//! `postbox.aio` passes a `wake` that calls `loop.call_soon_threadsafe`, so the event loop is
//! woken from the driver thread and collects the result with `AsyncReceive.result()`. A
//! thousand waiting receives cost a thousand small heap objects, not a thousand threads.
//!
//! `AsyncReceive.cancel()` drops the pending future on the calling thread, which withdraws the
//! wait; a message the store had already locked for it goes back to the queue with its
//! delivery uncounted (`Queue::receive_async`). If the future had resolved already, the message
//! it brought is abandoned: no longer locked, its delivery counted.

use std::pin::Pin;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Wake, Waker};

use postbox::sync::Mutex;
use postbox::{ReceiveFuture, Received};
use pyo3::prelude::*;

use crate::convert;
use crate::errors::{IntoPy, invalid};
use crate::live::Live;
use crate::message::PyMessage;
use crate::queue::PyQueue;

enum Slot {
    /// Waiting for the store.
    Pending(Pin<Box<ReceiveFuture>>),
    /// Resolved; not yet collected.
    Ready(Box<postbox::Result<Option<Received>>>),
    /// Collected or cancelled.
    Done,
}

struct Task {
    slot: Mutex<Slot>,
    /// Called (no arguments, under the GIL, on the driver thread) once the slot is `Ready`.
    wake: Mutex<Option<Py<PyAny>>>,
}

/// The waker of one task: queues it for the driver. Weak, so that a task dropped by its owner
/// (cancelled, collected) is not kept alive by the store's copy of the waker.
struct TaskWaker {
    task: Weak<Task>,
    driver: Sender<Arc<Task>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(task) = self.task.upgrade() {
            // The driver never exits, so the send cannot fail.
            let _ = self.driver.send(task);
        }
    }
}

/// The sender of the driver thread's queue of tasks to poll, started on first use (again in
/// a child made by `fork()`, which has no copy of the parent's thread).
fn driver() -> PyResult<Sender<Arc<Task>>> {
    static DRIVER: Mutex<Option<(u32, Sender<Arc<Task>>)>> = Mutex::new(None);
    let mut d = DRIVER.lock();
    let pid = postbox::binding::process_id();
    if let Some((owner, tx)) = &*d
        && *owner == pid
    {
        return Ok(tx.clone());
    }
    let (tx, rx) = channel::<Arc<Task>>();
    let me = tx.clone();
    std::thread::Builder::new()
        .name("postbox-aio".into())
        .spawn(move || {
            for task in rx {
                poll(&task, &me);
            }
        })
        .map_err(|e| invalid(format!("cannot start the asyncio driver thread: {e}")))?;
    *d = Some((pid, tx.clone()));
    Ok(tx)
}

fn poll(task: &Arc<Task>, driver: &Sender<Arc<Task>>) {
    let waker = Waker::from(Arc::new(TaskWaker {
        task: Arc::downgrade(task),
        driver: driver.clone(),
    }));
    {
        let mut slot = task.slot.lock();
        let Slot::Pending(fut) = &mut *slot else {
            return;
        };
        match fut.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Pending => return,
            Poll::Ready(r) => *slot = Slot::Ready(Box::new(r)),
        }
    }
    let wake = task.wake.lock().take();
    if let Some(wake) = wake {
        Python::attach(|py| {
            // A closed loop refuses the call: the result then waits in the task, and is given
            // back when the task is dropped.
            if let Err(e) = wake.call0(py) {
                e.write_unraisable(py, None);
            }
            drop(wake);
        });
    }
}

/// One receive in flight for `postbox.aio`. Made by `_receive_async`.
#[pyclass(frozen, module = "postbox._postbox", name = "AsyncReceive")]
pub struct PyAsyncReceive {
    task: Arc<Task>,
    queue: String,
}

#[pymethods]
impl PyAsyncReceive {
    /// Whether the receive has resolved (its `wake` was or is being called).
    fn done(&self) -> bool {
        matches!(*self.task.slot.lock(), Slot::Ready(_))
    }

    /// The outcome once resolved: the locked `Message`, `None` when the timeout ran out, or
    /// the store's error raised. Raises `InvalidArgumentError` before it resolved or when it
    /// was already collected or cancelled.
    fn result(&self) -> PyResult<Option<PyMessage>> {
        let taken = {
            let mut slot = self.task.slot.lock();
            match std::mem::replace(&mut *slot, Slot::Done) {
                Slot::Ready(r) => *r,
                other => {
                    *slot = other;
                    return Err(invalid("the async receive has no result to collect"));
                }
            }
        };
        Ok(taken.py_err()?.map(PyMessage::received))
    }

    /// Withdraws the receive: a pending wait is dropped (a message locked for it meanwhile
    /// goes back uncounted); a message it resolved with but nobody collected is abandoned.
    /// Returns True if it was still pending. Does nothing after `result()`.
    fn cancel(&self, py: Python<'_>) -> PyResult<bool> {
        drop(self.task.wake.lock().take());
        // Without the GIL: in a shared store the driver may be polling (one commit) with the
        // slot locked.
        py.detach(|| -> postbox::Result<bool> {
            let old = std::mem::replace(&mut *self.task.slot.lock(), Slot::Done);
            match old {
                Slot::Pending(fut) => {
                    drop(fut);
                    Ok(true)
                }
                Slot::Ready(r) => match *r {
                    Ok(Some(msg)) => msg
                        .abandon()
                        .map(|()| false)
                        .map_err(postbox::SettleError::into_error),
                    _ => Ok(false),
                },
                Slot::Done => Ok(false),
            }
        })
        .py_err()
    }

    fn __repr__(&self) -> String {
        let state = match *self.task.slot.lock() {
            Slot::Pending(_) => "pending",
            Slot::Ready(_) => "ready",
            Slot::Done => "done",
        };
        format!("<postbox.AsyncReceive of queue {:?}, {state}>", self.queue)
    }
}

/// Starts an async receive on `queue` waiting up to `timeout` seconds (forever if None);
/// `wake()` is called from the driver thread, under the GIL, once it resolves.
#[pyfunction]
#[pyo3(signature = (queue, timeout, wake))]
pub fn _receive_async(
    queue: &Bound<'_, PyQueue>,
    timeout: Option<&Bound<'_, PyAny>>,
    wake: Py<PyAny>,
) -> PyResult<PyAsyncReceive> {
    let q = queue.get();
    q.live()?;
    let timeout = convert::opt_duration(timeout, "timeout")?;
    let task = Arc::new(Task {
        slot: Mutex::new(Slot::Pending(Box::pin(q.q.receive_async(timeout)))),
        wake: Mutex::new(Some(wake)),
    });
    // The first poll registers the wait with the store.
    let _ = driver()?.send(Arc::clone(&task));
    Ok(PyAsyncReceive {
        task,
        queue: q.q.name().to_owned(),
    })
}
