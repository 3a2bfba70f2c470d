"""asyncio for postbox: receives that never block the event loop nor hold a thread each.

::

    import postbox, postbox.aio

    async def main(store: postbox.Store) -> None:
        jobs = postbox.aio.AsyncQueue(store.queue("jobs"))
        await jobs.send(b"resize 42.png")
        try:
            msg = await jobs.receive(timeout=1)
        except postbox.Empty:                     # nothing arrived in time, as q.receive
            return
        await msg.complete()

**Receives** (``AsyncQueue.receive``, ``async for``) wait in the store, not in a thread: one
native driver thread per process (started by the first async receive) polls every waiting
receive, woken by the store's own wake-ups, and wakes the receive's event loop with
``loop.call_soon_threadsafe`` when it resolves. A thousand receives waiting in one loop cost
that one thread.

**Cancellation** of a waiting receive (``task.cancel()``, ``asyncio.wait_for`` running out)
loses nothing and leaves nothing locked: the wait is withdrawn, and a message the store had
locked for it meanwhile goes back to the head of the queue with its delivery uncounted. If the
message had already reached the loop when the cancellation came, it is abandoned (no longer
locked; its ``delivery_count`` stays counted).

**Everything else** (sends, settles, transactions) is a short disk commit: it runs on a small
shared thread pool (``postbox-aio-io``, 4 threads) so that the loop never waits for the disk.
A transaction's ``receive`` waits in that pool too, so keep its timeout short; plain receives
are the ones meant for long waits.

The objects are bound to the store of the wrapped queue: once the store is closed every call
raises ``postbox.ClosedError``, and ``async for`` ends by raising it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from . import _postbox
from ._errors import ClosedError, Empty
from ._postbox import Message, Queue, Store, Transaction

__all__ = ["AsyncMessage", "AsyncProcessor", "AsyncQueue", "AsyncTransaction", "begin"]

_T = TypeVar("_T")
_log = logging.getLogger("postbox.aio")

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=4, thread_name_prefix="postbox-aio-io"
            )
        return _pool


async def _run(fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Runs a quick blocking call (a commit) on the shared pool."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _receive(queue: Queue, timeout: float | None) -> Message:
    """Waits for the next message of ``queue``; raises ``Empty`` when none came in time."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    handle = _postbox._receive_async(
        queue, timeout, functools.partial(loop.call_soon_threadsafe, _wake, fut)
    )
    try:
        await fut
    except BaseException:
        # Cancelled (or the loop is going away): withdraw the wait, give back what it got.
        handle.cancel()
        raise
    msg = handle.result()
    if msg is None:
        raise Empty(f"no message arrived in queue {queue.name!r} in time")
    return msg


class AsyncMessage:
    """A received ``Message`` with awaitable settle methods.

    Its data (``body``, ``id``, ``label``, ``delivery_count``, ``properties``, ...) are the
    wrapped message's attributes; ``message`` is the wrapped ``postbox.Message``.
    """

    __slots__ = ("message",)

    def __init__(self, message: Message) -> None:
        self.message = message

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message, name)

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def id(self) -> int:
        return self.message.id

    @property
    def delivery_count(self) -> int:
        return self.message.delivery_count

    @property
    def state(self) -> str:
        return self.message.state

    async def complete(self) -> None:
        """Removes the message for good (``Message.complete``)."""
        await _run(self.message.complete)

    async def abandon(self, delay: float | None = None) -> None:
        """Unlocks the message for another delivery (``Message.abandon``)."""
        await _run(self.message.abandon, delay)

    async def dead_letter(self, reason: str = "", description: str = "") -> None:
        """Moves the message to the dead-letter queue (``Message.dead_letter``)."""
        await _run(self.message.dead_letter, reason, description)

    async def renew_lock(self) -> Any:
        """Extends the lock (``Message.renew_lock``); returns the new ``locked_until``."""
        return await _run(self.message.renew_lock)

    def __repr__(self) -> str:
        return f"<postbox.aio.AsyncMessage {self.message!r}>"


class AsyncQueue:
    """A ``postbox.Queue`` seen from asyncio. ``queue`` is the wrapped queue.

    ``async for msg in q`` receives without end, waiting as long as it takes for each message;
    it ends by raising ``ClosedError`` once the store is closed (``QueueNotFoundError`` once
    the queue is deleted).
    """

    __slots__ = ("queue",)

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    @property
    def name(self) -> str:
        return self.queue.name

    async def send(self, body: Any, **props: Any) -> int:
        """``Queue.send`` on the shared pool; returns the message id."""
        return await _run(self.queue.send, body, **props)

    async def receive(self, timeout: float | None = None) -> AsyncMessage:
        """Locks the next message, waiting up to ``timeout`` seconds (``None``: forever)
        without blocking the loop or a thread. Raises ``postbox.Empty`` when nothing arrived
        in time, as ``Queue.receive`` does."""
        return AsyncMessage(await _receive(self.queue, timeout))

    def __aiter__(self) -> AsyncIterator[AsyncMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[AsyncMessage]:
        while True:
            yield AsyncMessage(await _receive(self.queue, None))

    def __repr__(self) -> str:
        return f"<postbox.aio.AsyncQueue {self.queue.name!r}>"


class AsyncTransaction:
    """A ``postbox.Transaction`` with awaitable calls, each run on the shared pool.

    ``async with begin(store) as tx:`` commits when the block ends normally and aborts when it
    raises. ``transaction`` is the wrapped ``postbox.Transaction``.
    """

    __slots__ = ("transaction",)

    def __init__(self, transaction: Transaction) -> None:
        self.transaction = transaction

    async def send(self, queue: Queue | AsyncQueue, body: Any, **props: Any) -> int:
        return await _run(self.transaction.send, _plain(queue), body, **props)

    async def receive(self, queue: Queue | AsyncQueue, timeout: float | None = None) -> Message:
        """Receives into the transaction; raises ``postbox.Empty`` when nothing arrived in
        time, as ``Transaction.receive`` does. The wait holds a pool thread: keep ``timeout``
        short."""
        return await _run(self.transaction.receive, _plain(queue), timeout)

    async def complete(self, message: Message | AsyncMessage) -> None:
        """Completes ``message`` (received outside) at commit."""
        m = message.message if isinstance(message, AsyncMessage) else message
        await _run(self.transaction.complete, m)

    async def commit(self) -> None:
        await _run(self.transaction.commit)

    async def abort(self) -> None:
        await _run(self.transaction.abort)

    @property
    def state(self) -> str:
        return self.transaction.state

    async def __aenter__(self) -> AsyncTransaction:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.transaction.state != "open":
            return
        if exc_type is None:
            await self.commit()
        else:
            await self.abort()

    def __repr__(self) -> str:
        return f"<postbox.aio.AsyncTransaction {self.transaction!r}>"


def begin(store: Store) -> AsyncTransaction:
    """A new transaction of ``store``: ``async with postbox.aio.begin(store) as tx:``."""
    return AsyncTransaction(store.transaction())


def _plain(queue: Queue | AsyncQueue) -> Queue:
    return queue.queue if isinstance(queue, AsyncQueue) else queue


class AsyncProcessor:
    """Runs ``async def handler(msg: AsyncMessage)`` on the caller's loop for every message of
    ``queue``, up to ``concurrency`` at a time (one task each).

    A handler that returns completes the message (unless it settled it itself); one that
    raises abandons it, so it is delivered again (and dead-lettered once the queue's
    ``max_deliveries`` is reached); the exception is logged to the ``postbox.aio`` logger and
    counted in ``failed`` (successes in ``processed``). ``await stop()`` stops receiving, waits for the running
    handlers and returns; a waiting receive is cancelled, which gives nothing up.
    Use ``async with AsyncProcessor(...):`` or ``start()`` / ``await stop()``.
    """

    def __init__(
        self,
        queue: Queue | AsyncQueue,
        handler: Callable[[AsyncMessage], Awaitable[Any]],
        concurrency: int = 1,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.queue = queue if isinstance(queue, AsyncQueue) else AsyncQueue(queue)
        self.handler = handler
        self.concurrency = concurrency
        self.processed = 0
        self.failed = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._receiving: set[asyncio.Task[None]] = set()
        self._stopping = False

    def start(self) -> None:
        """Starts the worker tasks on the running loop."""
        if self._tasks:
            raise RuntimeError("the processor is already started")
        self._stopping = False
        self._tasks = [asyncio.ensure_future(self._work()) for _ in range(self.concurrency)]

    async def _work(self) -> None:
        me = asyncio.current_task()
        assert me is not None
        while not self._stopping:
            self._receiving.add(me)
            try:
                msg = await self.queue.receive()
            except asyncio.CancelledError:
                if self._stopping:
                    return
                raise
            except ClosedError:
                return
            finally:
                self._receiving.discard(me)
            try:
                await self.handler(msg)
            except Exception:
                self.failed += 1
                _log.exception("handler failed on message %d of %r", msg.id, self.queue.name)
                if msg.state == "locked":
                    await msg.abandon()
            else:
                self.processed += 1
                if msg.state == "locked":
                    await msg.complete()

    async def stop(self) -> None:
        """Stops receiving and waits for the handlers running now to finish."""
        self._stopping = True
        for task in list(self._receiving):
            task.cancel()
        tasks, self._tasks = self._tasks, []
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> AsyncProcessor:
        self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def __repr__(self) -> str:
        state = "running" if self._tasks else "stopped"
        return f"<postbox.aio.AsyncProcessor of {self.queue.name!r}, {state}>"
