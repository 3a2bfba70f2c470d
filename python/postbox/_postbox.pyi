"""Type stubs of the native module postbox._postbox (checked by mypy.stubtest in CI)."""

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypedDict, final

from typing_extensions import Self, TypeAlias, Unpack

from ._typed import Codec

_Body: TypeAlias = bytes | bytearray | memoryview | str
_Seconds: TypeAlias = float | timedelta
_PropertyValue: TypeAlias = str | bytes
_Key: TypeAlias = bytes | bytearray | memoryview | str

class _SendProps(TypedDict, total=False):
    """The keywords of ``Queue.send``, as the methods that take ``**props`` accept them."""

    label: str | None
    content_type: str | None
    priority: int | None
    correlation_id: str | None
    reply_to: str | None
    ttl: _Seconds | None
    delay: _Seconds | None
    visible_at: datetime | None
    expires_at: datetime | None
    group: str | None
    sequence: int | None
    properties: Mapping[str, _PropertyValue | bytearray | memoryview] | None
    message_key: str | None

class _QueueOptions(TypedDict, total=False):
    """The keywords of ``Store.queue`` (see there), as ``temporary_queue`` accepts them."""

    lock_duration: _Seconds | None
    max_deliveries: int | None
    default_ttl: _Seconds | None
    max_message_size: int | None
    max_messages: int | None
    max_bytes: int | None
    dedup_window: _Seconds | None
    requires_session: bool | None
    forward_to: str | Queue | None
    forward_dead_letters_to: str | Queue | None
    journal: int | None
    auto_delete_on_idle: _Seconds | None
    receipts_to: str | Queue | None
    default_priority: int | None

__all__ = [
    "AdminServer",
    "AsyncReceive",
    "Bridge",
    "Browse",
    "Collated",
    "Collator",
    "Consumer",
    "Job",
    "JobPiece",
    "JobProgress",
    "Message",
    "Processor",
    "Queue",
    "QueueInfo",
    "QueueStats",
    "Sent",
    "SeriesGap",
    "Session",
    "ShutdownReport",
    "Store",
    "Table",
    "Topic",
    "TopicStats",
    "Transaction",
    "TransactionTable",
    "_shutdown_all",
    "_error_kinds",
    "_receive_async",
    "__version__",
    "FEATURES",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "DEFAULT_PRIORITY",
    "REASON_TTL_EXPIRED",
    "REASON_MAX_DELIVERIES",
    "REASON_DESTINATION_MISSING",
    "RECEIPT_LABEL",
    "RECEIPT_MESSAGE_ID",
    "RECEIPT_QUEUE",
    "RECEIPT_OUTCOME",
    "RECEIPT_AT",
    "RECEIPT_REASON",
]

__version__: str
# The optional parts this module was built with: "admin" (Store.serve_admin), "bridge"
# (Store.bridge). The default wheel has neither (README, "Features and defaults").
FEATURES: frozenset[str]
MAX_PRIORITY: int
MIN_PRIORITY: int
DEFAULT_PRIORITY: int
REASON_TTL_EXPIRED: str
REASON_MAX_DELIVERIES: str
REASON_DESTINATION_MISSING: str
RECEIPT_LABEL: str
"""The label of a receipt (``"receipt"``), posted to a queue's ``receipts_to``."""
RECEIPT_MESSAGE_ID: str
"""Receipt property: the settled message's id, in decimal (also its ``correlation_id``)."""
RECEIPT_QUEUE: str
"""Receipt property: the queue the message was settled in."""
RECEIPT_OUTCOME: str
"""Receipt property: ``"completed"`` or ``"dead-lettered"``."""
RECEIPT_AT: str
"""Receipt property: when, in milliseconds since the Unix epoch, in decimal."""
RECEIPT_REASON: str
"""Receipt property of a dead letter: its reason."""

@final
class Store:
    """One store file holding many queues; a context manager that closes it.

    A store belongs to the process that opened it. In a child made by ``fork()`` every call on
    it and on its queues, messages, transactions and processors raises ``ForkedError`` and
    writes nothing; ``close()``, leaving a ``with`` block and garbage collection there only let
    go of the handle. The child opens the store itself (``multi_process=True`` to share it).
    """

    def __new__(
        cls,
        path: str | PathLike[str],
        durability: Literal["immediate", "none"] = "immediate",
        multi_process: bool = False,
        *,
        cache_size: int | None = None,
        poll_interval: tuple[_Seconds, _Seconds] | None = None,
        verify_on_open: bool = True,
        write_ahead_log: bool = True,
        accept_log_loss: bool = False,
    ) -> Store:
        """Opens (creating if needed) the store file at ``path``.

        ``write_ahead_log`` (default on, single-process stores only) makes each durable commit
        one append to ``<path>-log`` beside the file, which the store file catches up with in
        the background; after a crash the next open replays it. ``False`` makes every commit
        a durable commit of the store file itself. Stores with ``multi_process=True`` or
        ``durability="none"`` never use the log. Raises a ``StoreError`` subclass
        (``AlreadyOpenError``, ``StoreCorruptedError``, ``NotAStoreError``, ``IoError``…)
        when the file cannot be opened.

        A store that was not closed cleanly needs its log: when the log is missing, cut,
        zeroed, another store's or a copy from an earlier time, the open raises
        ``StoreCorruptedError`` naming the log and what is wrong with it, and changes nothing.
        ``accept_log_loss=True`` opens such a store anyway: the records that can still be
        verified are replayed, the damaged log is kept aside as ``<path>-log.damaged-<time>``,
        and ``log_loss`` says what was lost.

        ``verify_on_open=False`` skips the checksum check of every page at open (a faster open
        of a large store): damaged messages are still reported by the operation that reads
        them, but damage to the file's own structures may surface as a missing message or
        queue, or abort the process inside the storage engine's commit. Skip it only for files
        known to be sound.

        ``poll_interval=(floor, ceiling)`` (seconds; default ``(0.001, 1.0)``) matters only for
        ``multi_process=True`` stores where no change notification on the file tells waiters
        of other processes' messages (on Linux inotify does, and waiters do not poll): a
        waiting receive then polls the file after ``floor``, doubling up to ``ceiling``, so a
        message from another process is seen within ``ceiling`` and an idle waiter wakes about
        once per ``ceiling``.

        ``cache_size`` (bytes; default 64 MiB) is the store's page cache. With the log, the
        pages its background commits change stay there, up to that size, until a checkpoint
        writes them, so a smaller cache shortens the send during which a checkpoint lands;
        reads of a backlog larger than the cache then come from the operating system's page
        cache.
        """
    @property
    def log_loss(self) -> str | None:
        """What the open could not recover (``accept_log_loss=True`` and a missing or damaged
        log), or ``None``."""
    @property
    def path(self) -> Path: ...
    @property
    def durability(self) -> Literal["immediate", "none"]: ...
    @property
    def multi_process(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def queue(
        self,
        name: str,
        *,
        lock_duration: _Seconds | None = ...,
        max_deliveries: int | None = ...,
        default_ttl: _Seconds | None = ...,
        max_message_size: int | None = ...,
        max_messages: int | None = ...,
        max_bytes: int | None = ...,
        dedup_window: _Seconds | None = ...,
        requires_session: bool | None = ...,
        forward_to: str | Queue | None = ...,
        forward_dead_letters_to: str | Queue | None = ...,
        journal: int | None = ...,
        auto_delete_on_idle: _Seconds | None = ...,
        receipts_to: str | Queue | None = ...,
        default_priority: int | None = ...,
    ) -> Queue:
        """Opens queue ``name``, creating it if missing; an existing queue keeps its messages.

        Only the options given change an existing queue; the others keep their stored values.
        ``None`` clears an optional option (``default_ttl``, ``max_messages``, ``max_bytes``,
        ``dedup_window``, ``forward_to``, ``forward_dead_letters_to``, ``journal``) and puts a
        required one (``lock_duration``, ``max_deliveries``, ``max_message_size``,
        ``requires_session``) back to its default.

        ``requires_session=True`` (only when the queue is created) makes it a session queue:
        messages must carry a ``group`` and are received through ``accept_session`` only.
        ``forward_to`` sends every message sent to this queue to another queue instead, in the
        same commit (chains are followed; loops are refused); ``forward_dead_letters_to`` sends
        its dead letters to another queue; ``journal=n`` keeps the last ``n`` completed
        messages in ``Queue.journal``.

        ``auto_delete_on_idle`` (seconds or ``timedelta``) deletes the queue, its dead-letter
        queue and their messages once that long has passed without a send, receive, settle or
        lock renewal — within a second after it (usually about a tenth of a second: activity
        is recorded to a tenth of a second), never before; a queue holding locked messages is
        never idle.
        ``receipts_to`` posts a receipt to that queue, in the same commit, whenever a message
        of this queue is completed or dead-lettered: an empty body labelled ``"receipt"``, its
        ``correlation_id`` the settled message's id in decimal, and string properties
        ``message_id``, ``queue``, ``outcome`` (``"completed"`` or ``"dead-lettered"``),
        ``at`` (milliseconds since the epoch) and, for a dead letter, ``reason`` (the
        ``RECEIPT_*`` constants name them). Both are cleared with ``None``.

        ``forward_to``, ``forward_dead_letters_to`` and ``receipts_to`` must name an existing,
        plain, non-temporary queue (``InvalidArgumentError`` otherwise), which is then in use:
        ``delete_queue`` raises ``InUseError`` for it and ``auto_delete_on_idle`` skips it.

        ``default_priority`` (0 to ``MAX_PRIORITY``, default 3; ``None`` puts it back) is the
        priority of a message sent to this queue without ``priority=``; a message that gives
        one keeps it. Above ``MAX_PRIORITY`` raises ``InvalidArgumentError``.
        """
    def open_queue(self, name: str) -> Queue:
        """Opens queue ``name`` only if it exists, never creating it.

        Raises ``QueueNotFoundError`` otherwise: a late reply cannot re-create a deleted
        temporary queue, and a typo creates nothing.
        """
    def queues(self) -> list[str]: ...
    def temporary_queue(self, **options: Unpack[_QueueOptions]) -> Queue:
        """Creates a temporary queue with the options of ``queue``; it goes with this handle.

        It is deleted with its messages when the store is closed, when this process dies
        (noticed by the next process that opens the store, or a shared store's next writer),
        or when the store is next opened in single-process mode. Its name (``$temporary/…``,
        which ``queue()`` refuses to create) is unique: give it out as a ``reply_to``; a
        responder opens it with ``open_queue``. ``requires_session`` and ``journal`` are
        refused (``InvalidArgumentError``).
        """
    def queue_infos(self) -> list[QueueInfo]:
        """Every queue with its options, whether it is temporary and its last activity."""
    def create_job(
        self, *, continuation: tuple[Queue | str, _Body | Mapping[str, Any]] | None = None
    ) -> Job:
        """Creates a job: work split into pieces whose completion is tracked exactly.

        ``continuation=(queue, message)`` sends ``message`` to ``queue`` once the job is done,
        in the commit that ends its last piece (or seals it): exactly once. ``message`` is a
        body or a dict with a ``"body"`` key and ``Queue.send``'s keywords (a ``send_batch``
        item); ``queue`` a ``Queue`` or the name of an existing queue, which is then in use
        (``delete_queue`` raises ``InUseError``) until the job is done or deleted. A bad
        continuation raises ``QueueNotFoundError``, ``MessageTooLargeError`` or
        ``InvalidArgumentError`` (also for a temporary queue, which goes with its process).
        """
    def job(self, id: int) -> Job:
        """Opens job ``id`` (created here or in another process).

        Raises ``NotFoundError`` (``job_id`` set) when there is no such job.
        """
    def table(self, name: str) -> Table:
        """Application table ``name``: bytes keys to bytes values, each write its own commit.

        ``Transaction.table`` writes rows in the same commit as messages. The table exists
        once a row is written; a name that is empty or over 1 KiB raises
        ``InvalidArgumentError``.
        """
    def topic(self, name: str) -> Topic:
        """Opens topic ``name``, creating it if missing; it keeps its subscriptions.

        A topic and a queue (or collator) cannot share a name: ``InvalidArgumentError``.
        """
    def open_topic(self, name: str) -> Topic:
        """Opens topic ``name`` only if it exists; raises ``QueueNotFoundError`` otherwise."""
    def topics(self) -> list[str]:
        """The names of all topics (``queues()`` lists subscription queues, not topics)."""
    def collator(self, name: str, destination: Queue) -> Collator:
        """Opens collator ``name``, which releases into ``destination``, creating it if missing.

        An existing collator keeps the messages it holds and must already release into
        ``destination`` (``InvalidArgumentError`` otherwise), which is in use while the collator
        exists (``delete_queue`` raises ``InUseError``). A collator whose destination no longer
        exists (only in a store an older postbox wrote) refuses sends with
        ``QueueNotFoundError`` naming it; opened with a ``destination``, it takes that one and
        releases there what was ready.
        """
    def delete_queue(self, name: str) -> bool:
        """Deletes a queue, its dead-letter queue and their messages; whether it existed.

        The name of a topic deletes it with every subscription; the name of a collator deletes
        it with the messages it holds. A queue that something names is in use and is not
        deleted: another queue's ``forward_to``, ``forward_dead_letters_to`` or
        ``receipts_to``, a collator releasing into it, or a job that is not done and sends its
        continuation there. Raises ``InUseError`` (``used_by`` says which) then, with nothing
        deleted; ``auto_delete_on_idle`` skips such a queue too.
        """
    def transaction(self) -> Transaction:
        """A new transaction; raises ``ClosedError`` at once on a closed store."""
    def stats(self) -> dict[str, int | float]:
        """Commit-pipeline counters of this handle.

        Keys: ``commits``, ``operations`` (redb write transactions and the operations they
        carried), ``replayed_records`` (write-ahead log records the open replayed; 0 after a
        clean close), ``log_records``, ``log_bytes`` (appended by this handle),
        ``checkpoints``, and the float totals ``log_run_seconds``, ``log_apply_seconds``,
        ``log_write_seconds``, ``log_sync_seconds``. A closed store keeps answering with its
        final counters; raises ``ForkedError`` in a forked child.
        """
    def compact(self) -> tuple[int, int]:
        """Returns the space of deleted queues and purged messages to the file system.

        The store file is rewritten in place with its live data at the front and truncated;
        returns its size ``(bytes_before, bytes_after)`` just before and just after the
        compaction itself (after the log's checkpoint and after waiting for other processes'
        reads, so what they wrote meanwhile is in both): their difference is what it freed.
        Nothing the store holds changes:
        messages, locks (a message received before can be completed after), counts, dead
        letters and options stay as they were, and every handle stays valid. The file never
        shrinks on its own: freed space is only reused by later writes.

        Every other operation on the store waits while it runs (operations in progress finish
        first); the GIL is released meanwhile. In a store shared with other processes their
        operations on the file wait too, and a compaction that finds another process reading
        the file tries again for a few seconds.

        Raises ``AlreadyOpenError`` when the store could not be had alone in time (nothing
        changed: try again, or compact with the other processes closed), ``ClosedError``,
        ``ForkedError`` in a forked child, ``IoError``, ``StorageFullError`` and
        ``StoreCorruptedError``.
        """
    def serve_admin(
        self,
        addr: str = "127.0.0.1:0",
        *,
        allow_actions: bool = False,
        token: str | None = None,
    ) -> AdminServer:
        """Serves the admin endpoint of this store on ``addr`` (``"host:port"``; port 0 picks
        a free one) from threads of its own: the live dashboard page, ``/metrics`` in
        Prometheus text format, and the commands of ``postbox --admin URL``, so that the
        ``postbox`` command reaches a store this process holds in single-process mode.

        Requests must name the endpoint in ``Host`` (its address, a loopback address or
        ``localhost``), so a page reaching it through DNS rebinding is refused. Counts (the
        page, ``/metrics``) are open; dead letters and every ``postbox --admin`` command need
        ``token`` in the ``X-Postbox-Token`` header (a random one when ``None``: read
        ``AdminServer.token``). With ``allow_actions=True`` the page's resubmit button and
        commands that change the store are allowed too. The store stays open when the server
        stops; stop the server before closing the store.

        The endpoint is an optional part of the module, built with the cargo feature ``admin``
        (``"admin" in postbox.FEATURES``); the default wheel leaves it out, and
        ``postbox dashboard`` serves the same page for a store opened with
        ``multi_process=True``.

        Raises ``InvalidArgumentError`` for an address that does not parse or a token that is
        empty or not printable ASCII without spaces, ``IoError`` when it cannot listen there
        (address in use), ``ClosedError``, ``ForkedError``, and ``UnsupportedError`` (naming
        the build option) in a module built without the ``admin`` feature.
        """
    def bridge(self, config: str) -> Bridge:
        """Starts a bridge between this store's queues and RabbitMQ quorum queues.

        ``config`` is the TOML text of a bridge configuration, the format of ``postbox bridge
        --config`` (``broker``, ``[retry]``, ``[[link]]`` tables); its ``store`` and ``bind``
        keys are ignored here. Local queues are opened (created with default options when
        missing); the broker need not be up: links connect, and keep reconnecting, in the
        background, and messages wait in the local queues meanwhile. Returns the running
        ``Bridge``; stop it (or use ``with``) before closing the store.

        The bridge is an optional part of the module, built with the cargo feature ``bridge``
        (``"bridge" in postbox.FEATURES``); the default wheel leaves it out, and
        ``postbox bridge --config FILE`` runs the same bridge beside a store opened with
        ``multi_process=True``.

        Raises ``ConfigError`` for a configuration that does not parse or cannot work,
        ``ClosedError``, ``ForkedError``, and ``UnsupportedError`` (naming the build option)
        in a module built without the ``bridge`` feature.
        """
    def close(self) -> None:
        """Closes the store; in a forked child only lets go of the handle (returns at once)."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...

class _LinkStats(TypedDict):
    """One link's statistics, as ``Bridge.stats()`` and ``Bridge.stop()`` return them."""

    direction: Literal["outgoing", "incoming"]
    local: str
    remote: str
    connected: bool
    forwarded: int
    in_flight: int
    reconnects: int
    republished: int
    nacked: int
    dead_lettered: int
    rejected: int
    local_retries: int
    last_error: str | None

@final
class Bridge:
    """A running bridge (from ``Store.bridge``): links carrying messages between local queues
    and RabbitMQ queues on threads of their own; a context manager that stops it. The store
    stays open when it stops. In a forked child every call raises ``ForkedError``."""

    def stats(self) -> list[_LinkStats]:
        """Each link's statistics, in configuration order (after ``stop()``, the final ones).

        ``direction`` is ``"outgoing"`` or ``"incoming"``, ``local`` the local queue,
        ``remote`` the broker queue (or ``"exchange/routing-key"``), ``last_error`` ``None`` or
        the text of the last failure.
        """
    @property
    def forwarded(self) -> int:
        """Messages carried end to end by every link together."""
    @property
    def connected(self) -> bool:
        """Whether every link is connected now (``False`` once stopped)."""
    def status_line(self) -> str:
        """One line for a terminal or a log: per link, its counts and state (up or DOWN)."""
    def metrics(self) -> str:
        """The counters in Prometheus' text format (``postbox_bridge_forwarded_total``, ...)."""
    def wait_connected(self, timeout: _Seconds) -> bool:
        """Waits (GIL released) until every link is connected; ``False`` if ``timeout`` ran out
        or the bridge was stopped."""
    def stop(self) -> list[_LinkStats]:
        """Stops every link (GIL released) and returns the final statistics.

        Outgoing links wait up to five seconds for the broker's confirms already due and give
        every other message back to its local queue without counting a delivery; incoming
        links finish the batch being stored. Calling it again returns the same statistics.
        """
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

@final
class AdminServer:
    """A running admin endpoint (from ``Store.serve_admin``); a context manager that stops it."""

    @property
    def url(self) -> str:
        """The dashboard's URL, ``"http://127.0.0.1:PORT/"``."""
    @property
    def port(self) -> int:
        """The port it listens on (the real one when 0 was asked for)."""
    @property
    def token(self) -> str:
        """The token dead letters, ``postbox --admin`` commands and actions need."""
    def stop(self) -> None:
        """Stops serving; the store stays open. Calling it again does nothing."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

@final
class Queue:
    @property
    def name(self) -> str: ...
    @property
    def options(self) -> dict[str, Any]: ...
    @property
    def is_dead_letter_queue(self) -> bool: ...
    @property
    def source_name(self) -> str | None: ...
    @property
    def dead_letters(self) -> Queue: ...
    @property
    def journal(self) -> Queue:
        """The queue's journal: the completed messages it keeps while ``journal`` is set.

        At most that many, the oldest dropped first; a queue like any other to browse, peek,
        receive and purge. Raises ``InvalidArgumentError`` if the queue never had a journal.
        """
    def accept_session(self, timeout: _Seconds | None = None, *, group: str | None = None) -> Session:
        """Accepts a session of this queue (one created with ``requires_session=True``).

        With ``group=None`` the next available session (a group whose next message is
        receivable and that no other receiver holds), else that group's session, waiting
        while another receiver holds it. Waits up to ``timeout`` (``None``: forever) and
        raises ``Empty`` when none comes. ``with queue.accept_session() as s:`` releases it
        on exit.
        """
    def send(
        self,
        body: _Body,
        *,
        label: str | None = None,
        content_type: str | None = None,
        priority: int | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        ttl: _Seconds | None = None,
        delay: _Seconds | None = None,
        visible_at: datetime | None = None,
        expires_at: datetime | None = None,
        group: str | None = None,
        sequence: int | None = None,
        properties: Mapping[str, _PropertyValue | bytearray | memoryview] | None = None,
        message_key: str | None = None,
    ) -> int: ...
    def send_batch(self, messages: Iterable[_Body | Mapping[str, Any]]) -> list[int]: ...
    def send_checked(self, body: _Body, **props: Unpack[_SendProps]) -> Sent:
        """``send``, saying whether the message was a duplicate.

        A duplicate's ``message_key`` was in the queue's ``dedup_window``: nothing was stored
        and ``Sent.id`` is the original message's id.
        """
    def send_batch_checked(self, messages: Iterable[_Body | Mapping[str, Any]]) -> list[Sent]:
        """``send_batch`` (one commit, all or none), saying of each message what happened."""
    def request(
        self, body: _Body, timeout: _Seconds | None = None, **props: Unpack[_SendProps]
    ) -> Message:
        """Sends a request and waits up to ``timeout`` (``None``: forever) for its reply.

        The request goes out with ``reply_to`` set to the store handle's reply queue (a
        temporary queue, replacing any ``reply_to`` given) and a fresh ``correlation_id``
        unless one is given; the responder answers with ``Message.reply``. The reply is
        received, completed and returned as a read-only ``Message`` (``state`` is
        ``"completed"``: nothing to settle). Replies to other requests, from any thread, stay
        for their own requesters. Raises ``Empty`` when no reply comes in time; a reply that
        comes later is dropped (the handle's next request removes it), so late replies never
        pile up. Ctrl-C interrupts the wait.
        """
    def peek(self, timeout: _Seconds | None = None) -> Message | None:
        """The message ``receive`` would take next, without locking it; ``None`` if none.

        With a ``timeout`` it waits up to that long for one to be receivable; by default it
        does not wait. Another receiver may take the message meanwhile.
        """
    def browse(self) -> Browse: ...
    def get(self, id: int) -> Message | None:
        """The message ``id`` of this queue, whatever its state, without locking it; ``None``
        if the queue has none. Its ``state`` is its state in the queue: ``"active"``,
        ``"locked"`` (by any receiver), ``"scheduled"`` or ``"deferred"``."""
    def receive(self, timeout: _Seconds | None = None) -> Message: ...
    def receive_nowait(self) -> Message: ...
    def receive_by_id(self, id: int, timeout: _Seconds | None = None) -> Message:
        """Locks message ``id`` of this queue, waiting up to ``timeout`` (``None``: forever).

        Other messages are left alone. Raises ``Empty`` when the message is not receivable
        in time (another queue's, completed, or locked by another receiver), and
        ``InvalidArgumentError`` on a queue that requires sessions: only the holder of a group
        takes its messages (``Session.receive_by_id``).
        """
    def receive_by_correlation_id(
        self, correlation_id: str, timeout: _Seconds | None = None
    ) -> Message:
        """Locks the first message (in delivery order) with this correlation id.

        Waits up to ``timeout`` (``None``: forever) and raises ``Empty`` when none arrives:
        on a reply queue shared by several requesters, each takes only its own replies. The
        pick reads the receivable messages in order until one matches. Raises
        ``InvalidArgumentError`` on a queue that requires sessions
        (``Session.receive_by_correlation_id`` picks within a held group).
        """
    def receive_batch(self, max_messages: int, timeout: _Seconds | None = None) -> list[Message]: ...
    def complete_batch(self, messages: Iterable[Message]) -> None: ...
    def complete_batch_and_receive(
        self, messages: Iterable[Message], max_messages: int, timeout: _Seconds | None = None
    ) -> list[Message]: ...
    def stats(self) -> QueueStats:
        """Exact counts of every state in one snapshot: ``active``, ``locked``, ``scheduled``,
        ``deferred``, ``dead_lettered`` and ``bytes``."""
    def __len__(self) -> int:
        """Messages receivable now (``stats().active``) — only those: a queue whose only
        message is locked by a receiver (or scheduled, or deferred) has length 0, though it is
        not empty; ``stats()`` counts every state."""
    def purge(self) -> int: ...
    def consume(self, timeout: _Seconds | None = None) -> Consumer: ...

@final
class QueueStats:
    @property
    def active(self) -> int: ...
    @property
    def locked(self) -> int: ...
    @property
    def scheduled(self) -> int: ...
    @property
    def deferred(self) -> int:
        """Set aside with ``Message.defer()``: receivable only by id (``receive_by_id``)."""
    @property
    def dead_lettered(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    def _asdict(self) -> dict[str, int]: ...
    def __eq__(self, value: object, /) -> bool: ...
    __hash__: None  # type: ignore[assignment]

@final
class Message:
    @property
    def id(self) -> int: ...
    @property
    def queue(self) -> str: ...
    @property
    def body(self) -> bytes: ...
    @property
    def text(self) -> str: ...
    @property
    def label(self) -> str | None: ...
    @property
    def content_type(self) -> str | None: ...
    @property
    def correlation_id(self) -> str | None: ...
    @property
    def reply_to(self) -> str | None: ...
    @property
    def message_key(self) -> str | None: ...
    @property
    def group(self) -> str | None: ...
    @property
    def sequence(self) -> int | None: ...
    @property
    def priority(self) -> int: ...
    @property
    def delivery_count(self) -> int: ...
    @property
    def enqueued_at(self) -> datetime: ...
    @property
    def visible_at(self) -> datetime | None: ...
    @property
    def expires_at(self) -> datetime | None: ...
    @property
    def properties(self) -> dict[str, _PropertyValue]: ...
    @property
    def dead_letter_reason(self) -> str | None: ...
    @property
    def dead_letter_description(self) -> str | None: ...
    @property
    def dead_letter_source(self) -> str | None: ...
    @property
    def dead_lettered_at(self) -> datetime | None: ...
    @property
    def lock_token(self) -> int | None: ...
    @property
    def locked_until(self) -> datetime | None: ...
    @property
    def state(
        self,
    ) -> Literal[
        "active",
        "locked",
        "scheduled",
        "deferred",
        "transaction",
        "completed",
        "abandoned",
        "dead-lettered",
        "resubmitted",
        "enlisted",
        "processor",
        "lock lost",
        "settled by the processor",
        "outcome unknown",
    ]:
        """Where the message stands for this handle.

        Read without a lock (``peek``, ``browse``, ``get``): its state in its queue when it
        was read — ``"active"``, ``"locked"`` (by any receiver), ``"scheduled"`` or
        ``"deferred"`` (peek and browse read active messages). Received: ``"locked"`` while
        this handle holds it, then how it was settled (``"completed"``, ``"abandoned"``,
        ``"dead-lettered"``, ``"resubmitted"``, ``"deferred"``, ``"lock lost"``). In a
        transaction: ``"transaction"`` while it is open, then ``"completed"`` (committed),
        ``"abandoned"`` (aborted, dropped, or its commit failed) or ``"outcome unknown"``. In
        a processor handler: ``"processor"``, then ``"settled by the processor"``. A
        request's reply: ``"completed"``.
        """
    def complete(self) -> None: ...
    def abandon(self, delay: _Seconds | None = None) -> None: ...
    def dead_letter(self, reason: str, description: str = "") -> None:
        """Moves the message to the dead-letter queue.

        ``reason`` is at most 256 bytes of UTF-8 (longer raises ``InvalidArgumentError``);
        ``description`` is cut to 4096 bytes. A refused or failed settle leaves the message
        locked, so a valid settle can follow; after ``LockLostError`` the handle is spent.
        """
    def resubmit(self) -> None: ...
    def defer(self) -> None:
        """Sets the message aside in its queue, receivable only by id.

        No ``receive``, ``peek`` or ``browse`` returns it again; ``Queue.receive_by_id(msg.id)``
        does. It keeps its time to live and delivery count and counts in ``stats().deferred``;
        a later lock on it that ends unsettled (abandon, expiry) leaves it deferred again.
        """
    def renew_lock(self) -> datetime:
        """Extends the lock by the queue's lock_duration from now; returns the new expiry.

        A message received in a transaction renews through it; a processor handler's message
        renews the processor's lock (which the processor renews anyway, up to
        ``max_auto_renew``: this is for a handler that runs longer). Raises ``LockLostError``
        and ``InvalidArgumentError`` for a peeked or settled message, a finished transaction,
        or a processor handler that already returned.
        """
    @property
    def lock_lost(self) -> bool:
        """In a processor handler: whether the message's lock is gone (a renewal was refused,
        or the lock expired: renewal off or past ``max_auto_renew``). The processor will not
        complete the message then. Live while the handler runs; ``False`` for a message that
        did not come from a processor."""
    @property
    def cancelled(self) -> bool:
        """In a processor handler: whether to give up — ``lock_lost``, or the
        ``handler_timeout`` passed (the processor will not complete the message either way).
        Live; poll it between steps of long work. ``False`` outside a processor."""
    def reply(self, body: _Body, **props: Unpack[_SendProps]) -> int:
        """Answers the message; returns the reply's id.

        The reply goes to the queue named by ``reply_to``, its ``correlation_id`` set to this
        message's correlation id (or, if none, its id in decimal): what ``Queue.request``
        waits for. When it is sent depends on who holds the message:

        - received: with the completion, in one commit; nothing is sent unless the completion
          commits, and failures other than ``LockLostError`` leave the message locked;
        - received in a transaction: as one of the transaction's sends, stored at its commit
          (which completes the message), discarded by an abort;
        - in a processor handler: in the commit that completes the message when the handler
          returns (with a transactional handler, in its ``tx``); nothing is sent if the handler
          raises, asks for a dead letter or loses the lock. One reply per delivery.

        Raises ``InvalidArgumentError`` without a ``reply_to`` (or for a peeked or settled
        message, a second reply in a handler, a handler that already returned),
        ``QueueNotFoundError`` when that queue is gone, ``LockLostError``.
        """
    def mark_done(self, keys: str | Iterable[str]) -> datetime:
        """Records progress keys on the message, renewing its lock; returns the new expiry.

        One commit, at once; a redelivery (after an abandon, a lock expiry, a failed handler
        or a crash) reads the keys with ``done_keys()`` and skips that work; the completion
        removes them. ``keys`` is one ``str`` or an iterable of them, each 1 to 1024 bytes
        (``InvalidArgumentError`` otherwise). Works on a received message (its own lock), a
        message received in a transaction (the transaction's lock: written at once, not at
        commit, so the keys survive an abort — they record work done outside it) and a
        processor handler's message (the processor's lock, which it keeps renewing; in a
        transactional handler too). Raises ``LockLostError`` (a received message's handle is
        spent then) and ``InvalidArgumentError`` for a peeked or settled message, a finished
        transaction, or a processor handler that already returned.
        """
    def done_keys(self) -> set[str]:
        """The keys recorded with ``mark_done`` in this delivery or earlier ones (one lookup).

        For a received message, one received in a transaction, or a processor handler's
        message; ``InvalidArgumentError`` for a peeked or settled one."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...

@final
class Browse(Iterator[Message]):
    def __iter__(self) -> Self: ...
    def __next__(self) -> Message: ...

@final
class Consumer(Iterator[Message]):
    def __iter__(self) -> Self: ...
    def __next__(self) -> Message: ...

@final
class Session:
    """One group of a session queue: its messages in send order, one at a time, to this holder.

    A held session is exclusive: nobody else takes a message of its group, not by id or by
    correlation id either (``Queue.receive_by_id`` and ``receive_by_correlation_id`` raise
    ``InvalidArgumentError`` on a session queue, with or without a transaction); the holder
    picks with ``receive_by_id`` and ``receive_by_correlation_id``. The session lock expires
    like a message lock unless renewed; once lost, calls raise ``LockLostError`` (with
    ``group`` set). The state outlives locks: whoever accepts the session next reads it. A
    context manager that releases the session on exit.
    """

    @property
    def group(self) -> str: ...
    @property
    def queue(self) -> Queue: ...
    @property
    def locked_until(self) -> datetime | None:
        """When the session lock expires unless renewed; ``None`` once released."""
    @property
    def released(self) -> bool: ...
    @property
    def state(self) -> bytes | None:
        """The session's state, ``None`` if never set or cleared."""
    def receive(self, timeout: _Seconds | None = None) -> Message:
        """Locks the session's next message, waiting up to ``timeout`` (``None``: forever).

        The next message becomes receivable when the previous one is completed,
        dead-lettered or deferred. Raises ``Empty`` when nothing is receivable in time.
        """
    def receive_by_id(self, id: int, timeout: _Seconds | None = None) -> Message:
        """Locks message ``id`` of the group, waiting up to ``timeout`` (``None``: forever).

        A deferred message of the group is receivable at any time, also while another message
        of the group is in hand (as a Service Bus session receiver takes deferred messages by
        sequence number); any other message only when it is the group's next, as ``receive``
        would lock it. Raises ``Empty`` when it is not receivable through the session in time
        (also another group's, or a completed one), ``LockLostError`` once the session lock
        was lost.
        """
    def receive_by_correlation_id(
        self, correlation_id: str, timeout: _Seconds | None = None
    ) -> Message:
        """Locks the group's first message, in send order, with this correlation id.

        Picks among the messages receivable through the session (its deferred messages and
        its next message, see ``receive_by_id``), waiting up to ``timeout`` (``None``:
        forever); unlike ``Queue.receive_by_correlation_id``, deferred messages count. Raises
        ``Empty`` when none is receivable in time, ``LockLostError`` once the lock was lost.
        """
    def renew_lock(self) -> datetime:
        """Extends the session lock by the queue's lock_duration; returns the new expiry."""
    def set_state(self, state: _Body | None) -> None:
        """Sets the state now (at most 64 KiB; ``None`` clears it).

        ``Transaction.set_session_state`` sets it in the same commit as settles and sends.
        """
    def release(self) -> None:
        """Lets go of the session lock; another receiver may accept it. Twice is harmless."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...

@final
class Transaction:
    @property
    def state(self) -> Literal["open", "committed", "aborted", "outcome unknown", "closed"]:
        """``"aborted"`` also after a commit that failed (nothing was applied);
        ``"outcome unknown"`` after a commit whose outcome is unknown; ``"closed"`` only for a
        transactional processor's, once its handler returned."""
    def receive(self, queue: Queue, timeout: _Seconds | None = None) -> Message: ...
    def receive_by_id(self, queue: Queue, id: int, timeout: _Seconds | None = None) -> Message:
        """Receives message ``id`` of ``queue`` into the transaction (see ``Queue``).

        Raises ``InvalidArgumentError`` on a queue that requires sessions: receive through the
        session and ``complete`` the message into the transaction.
        """
    def receive_by_correlation_id(
        self, queue: Queue, correlation_id: str, timeout: _Seconds | None = None
    ) -> Message:
        """Receives the first message of ``queue`` with this correlation id (see ``Queue``).

        Raises ``InvalidArgumentError`` on a queue that requires sessions.
        """
    def send(
        self,
        queue: Queue,
        body: _Body,
        *,
        label: str | None = None,
        content_type: str | None = None,
        priority: int | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        ttl: _Seconds | None = None,
        delay: _Seconds | None = None,
        visible_at: datetime | None = None,
        expires_at: datetime | None = None,
        group: str | None = None,
        sequence: int | None = None,
        properties: Mapping[str, _PropertyValue | bytearray | memoryview] | None = None,
        message_key: str | None = None,
    ) -> int:
        """Sends to ``queue`` when the transaction commits; returns the id it will have.

        The id is reserved now (it can go into a table row or another message of the same
        transaction) and is never used if the transaction aborts. A duplicate returns the
        original message's id (``send_checked`` says so).
        """
    def send_checked(self, queue: Queue, body: _Body, **props: Unpack[_SendProps]) -> Sent:
        """``send``, saying whether the message is a duplicate (nothing will be stored).

        A duplicate's ``message_key`` is in the queue's dedup window now, or was sent earlier
        in this transaction; ``Sent.id`` is then the original's. The window is checked again
        at commit: a key another sender stores in between makes the message a duplicate
        then, and its reserved id stays unused.
        """
    def send_piece(
        self, job: Job, queue: Queue, body: _Body, **props: Unpack[_SendProps]
    ) -> int:
        """Sends a piece of ``job`` to ``queue`` when the transaction commits; returns its id.

        A deleted or sealed job fails the commit (``NotFoundError``, ``InvalidArgumentError``).
        """
    def table(self, name: str) -> TransactionTable:
        """Application table ``name`` seen through this transaction.

        Reads see committed rows with this transaction's writes laid over them; writes are
        applied by the commit, atomically with its receives and sends, or not at all.
        """
    def publish(
        self,
        topic: Topic,
        body: _Body,
        *,
        label: str | None = None,
        content_type: str | None = None,
        priority: int | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        ttl: _Seconds | None = None,
        delay: _Seconds | None = None,
        visible_at: datetime | None = None,
        expires_at: datetime | None = None,
        group: str | None = None,
        sequence: int | None = None,
        properties: Mapping[str, _PropertyValue | bytearray | memoryview] | None = None,
        message_key: str | None = None,
    ) -> None:
        """Publishes to ``topic`` when the transaction commits (keywords of ``Queue.send``).

        It reaches the subscriptions the topic has at that commit, or none if the transaction
        aborts. A deleted topic or a full subscription fails the commit.
        """
    def complete(self, message: Message) -> None: ...
    def set_session_state(self, session: Session, state: _Body | None) -> None:
        """Sets the session's state when the transaction commits (an abort leaves it).

        ``None`` clears it; a session lock lost by then fails the commit.
        """
    def commit(self) -> None:
        """Applies every receive, send and table write atomically, in one durable commit.

        Raises ``LockLostError`` when a received message's lock expired and ``ConflictError``
        when a row that ``TransactionTable.increment`` or ``put_if`` read was changed by
        another commit since; on any error nothing was applied.
        """
    def abort(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...

@final
class Sent:
    """What became of one message of a send."""

    def __new__(cls, id: int, duplicate: bool = False) -> Sent: ...
    @property
    def id(self) -> int:
        """The message's id; for a duplicate, the id of the message first sent with its key."""
    @property
    def duplicate(self) -> bool:
        """The dedup window already held the message's ``message_key``: nothing was stored."""
    def _asdict(self) -> dict[str, Any]: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class QueueInfo:
    """A queue as ``Store.queue_infos()`` lists it."""

    @property
    def name(self) -> str: ...
    @property
    def options(self) -> dict[str, Any]:
        """Its stored options, as ``Queue.options`` reads them."""
    @property
    def temporary(self) -> bool:
        """Created by ``Store.temporary_queue``: it goes with its store handle."""
    @property
    def last_activity(self) -> datetime | None:
        """Its last send, receive, settle or lock renewal (to a tenth of a second, UTC), if recorded."""

@final
class Job:
    """A job: work split into messages (its pieces), tracked exactly.

    Each piece's completion or dead-lettering updates the job's counts and the piece's row in
    the same commit as the settle, in any thread or process. Once sealed (no more pieces) and
    every piece has ended, the job is done: ``wait()`` returns and the continuation, if any,
    is sent in that same commit, exactly once. A deleted job raises ``NotFoundError``.
    """

    @property
    def id(self) -> int:
        """The job's id: ``Store.job(id)`` opens it again, in any process."""
    def send(self, queue: Queue, body: _Body, **props: Unpack[_SendProps]) -> int:
        """Sends a piece to ``queue``; returns its id.

        Raises ``InvalidArgumentError`` once sealed, ``NotFoundError`` once deleted, and what
        ``Queue.send`` raises. A duplicate (by ``message_key``) is not a new piece.
        """
    def send_batch(self, queue: Queue, messages: Iterable[_Body | Mapping[str, Any]]) -> list[int]:
        """Sends several pieces atomically (items as for ``Queue.send_batch``); their ids."""
    def seal(self) -> JobProgress:
        """No more pieces: the job is done once every piece has ended. Twice is harmless."""
    def progress(self) -> JobProgress:
        """The job's counts now."""
    def pending(self) -> list[int]:
        """The ids of the pieces not yet ended, in id order."""
    def pieces(self) -> list[JobPiece]:
        """Every piece and how it stands, in id order."""
    def wait(self, timeout: _Seconds | None = None) -> JobProgress:
        """Waits up to ``timeout`` (``None``: forever) for the job to be done.

        Returns the progress then (``done`` is true); raises ``Empty`` when the time runs out
        first, as every wait does (``progress()`` says how far it got). Woken by the commit
        that ends the last piece, in this or another process; Ctrl-C interrupts it.
        """
    def delete(self) -> bool:
        """Deletes the job and its tracking table (pending pieces stay as plain messages)."""
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class JobProgress:
    """A job's counts, read from one snapshot."""

    @property
    def total(self) -> int:
        """Pieces sent."""
    @property
    def completed(self) -> int: ...
    @property
    def dead_lettered(self) -> int:
        """Pieces dead-lettered (or removed unsettled by a purge or a queue's deletion)."""
    @property
    def pending(self) -> int:
        """``total - completed - dead_lettered``."""
    @property
    def sealed(self) -> bool: ...
    @property
    def done(self) -> bool:
        """Sealed, and every piece has ended."""
    def _asdict(self) -> dict[str, Any]: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class JobPiece:
    """One piece of a job and how it stands."""

    @property
    def id(self) -> int: ...
    @property
    def state(self) -> Literal["pending", "completed", "dead-lettered"]: ...
    @property
    def ended_at(self) -> datetime | None:
        """When it was completed or dead-lettered; ``None`` while pending."""
    def __eq__(self, value: object, /) -> bool: ...
    __hash__: None  # type: ignore[assignment]

@final
class Table:
    """An application table: bytes keys (up to 1 KiB) to bytes values (up to 1 MiB).

    Each write is its own durable commit. ``str`` keys and values are stored as UTF-8; reads
    return ``bytes``. Also a mapping: ``t[key]`` (``KeyError`` if missing), ``t[key] = v``,
    ``del t[key]``, ``key in t``.
    """

    @property
    def name(self) -> str: ...
    def get(self, key: _Key, default: bytes | None = None) -> bytes | None:
        """The value of ``key``, or ``default`` when there is no such row."""
    def put(self, key: _Key, value: _Key) -> None:
        """Sets ``key`` to ``value`` in a commit of its own."""
    def delete(self, key: _Key) -> None:
        """Removes ``key`` in a commit of its own; a missing key is not an error."""
    def increment(self, key: _Key, delta: int = 1) -> int:
        """Adds ``delta`` to the counter in row ``key``; returns the new value.

        Atomic, in a commit of its own: concurrent increments from any threads and processes
        all count. The row holds the value as a decimal integer in ASCII (``str(n).encode()``,
        read back with ``int(table[key])``); a missing row counts as 0. Raises
        ``InvalidArgumentError`` (writing nothing) when the row holds anything else or the sum
        leaves the 64-bit signed range.
        """
    def put_if(self, key: _Key, expected: _Key | None, value: _Key) -> bool:
        """Sets ``key`` to ``value`` if the row holds ``expected`` now; returns whether it did.

        ``expected=None``: only if there is no such row. Atomic, in a commit of its own: a
        compare-and-set; ``False`` means another writer got there first.
        """
    def range(
        self, start: _Key | None = None, end: _Key | None = None, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """Rows with ``start <= key < end`` (``end=None``: to the end) in key order, at most
        ``limit`` (``None``: all)."""
    def __getitem__(self, key: _Key, /) -> bytes: ...
    def __setitem__(self, key: _Key, value: _Key, /) -> None: ...
    def __delitem__(self, key: _Key, /) -> None:
        """Removes ``key``; ``KeyError`` if there was no such row when looked up."""
    def __contains__(self, key: _Key, /) -> bool: ...

@final
class TransactionTable:
    """An application table seen through a transaction (``Transaction.table``).

    Reads see committed rows with the transaction's writes laid over them; writes apply at
    commit, with its receives and sends, or not at all. Plain reads take no locks: two
    transactions that ``get`` a row and ``put`` it back may both commit (the later write wins).
    ``increment`` and ``put_if`` make the value they read a condition of the commit, which
    raises ``ConflictError`` (applying nothing) if another commit changed the row first: run
    the transaction again. Once the transaction is finished or dropped, every call raises
    ``InvalidArgumentError``.
    """

    @property
    def name(self) -> str: ...
    def get(self, key: _Key, default: bytes | None = None) -> bytes | None: ...
    def put(self, key: _Key, value: _Key) -> None:
        """Sets ``key`` to ``value`` when the transaction commits."""
    def delete(self, key: _Key) -> None:
        """Removes ``key`` when the transaction commits; a missing key is not an error."""
    def increment(self, key: _Key, delta: int = 1) -> int:
        """Adds ``delta`` to the counter in row ``key`` as the transaction sees it.

        Returns the new value, which the commit writes (encoded as by ``Table.increment``).
        The value first read from the store becomes a condition of the commit:
        ``ConflictError`` at commit if another commit changed the row. Increments of one row
        in one transaction add up.
        """
    def put_if(self, key: _Key, expected: _Key | None, value: _Key) -> bool:
        """Sets ``key`` to ``value`` at commit if the row holds ``expected`` now (``None``: no row).

        Returns whether it will. On ``True`` the value read becomes a condition of the commit
        (``ConflictError`` if another commit changed the row); on ``False`` nothing is recorded.
        """
    def range(
        self, start: _Key | None = None, end: _Key | None = None, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]: ...
    def __getitem__(self, key: _Key, /) -> bytes: ...
    def __setitem__(self, key: _Key, value: _Key, /) -> None: ...
    def __delitem__(self, key: _Key, /) -> None: ...
    def __contains__(self, key: _Key, /) -> bool: ...

@final
class Topic:
    """A topic: a message published to it goes to every subscription whose filter it passes.

    Each subscription is a ``Queue`` named ``<topic>/$subscriptions/<name>`` with its own
    options and dead-letter queue; the copies are made in one commit.
    """

    @property
    def name(self) -> str: ...
    def subscribe(
        self,
        name: str,
        *,
        label: str | None = None,
        correlation_id: str | None = None,
        content_type: str | None = None,
        reply_to: str | None = None,
        group: str | None = None,
        properties: Mapping[str, _PropertyValue | bytearray | memoryview] | None = None,
        lock_duration: _Seconds | None = ...,
        max_deliveries: int | None = ...,
        default_ttl: _Seconds | None = ...,
        max_message_size: int | None = ...,
        max_messages: int | None = ...,
        max_bytes: int | None = ...,
        dedup_window: _Seconds | None = ...,
        requires_session: bool | None = ...,
        forward_to: str | Queue | None = ...,
        forward_dead_letters_to: str | Queue | None = ...,
        journal: int | None = ...,
        auto_delete_on_idle: _Seconds | None = ...,
        receipts_to: str | Queue | None = ...,
        default_priority: int | None = ...,
    ) -> Queue:
        """Opens subscription ``name`` (no ``/``), creating it if missing; returns its queue.

        The queue is named ``<topic>/$subscriptions/<name>``; that whole name is a queue name
        (at most 255 bytes of UTF-8, no control characters): ``InvalidArgumentError`` otherwise.
        Every filter keyword given (``label`` ... ``group``, and each of ``properties``) must
        equal the message's; with none, every message matches. An existing subscription takes
        the new filter and keeps its messages. The queue options work as in ``Store.queue``.
        A subscription that requires sessions (``requires_session=True``, or ``forward_to`` a
        queue that does) takes only messages with a ``group``: one without skips it, as if the
        filter refused it, and still reaches the other subscriptions.
        """
    def subscription(self, name: str) -> Queue:
        """The queue of existing subscription ``name``; ``QueueNotFoundError`` if none."""
    def unsubscribe(self, name: str) -> bool:
        """Removes subscription ``name`` with its messages; returns whether it existed."""
    def subscriptions(self) -> list[str]:
        """The subscription names (without the topic prefix), in name order."""
    def publish(
        self,
        body: _Body,
        *,
        label: str | None = None,
        content_type: str | None = None,
        priority: int | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        ttl: _Seconds | None = None,
        delay: _Seconds | None = None,
        visible_at: datetime | None = None,
        expires_at: datetime | None = None,
        group: str | None = None,
        sequence: int | None = None,
        properties: Mapping[str, _PropertyValue | bytearray | memoryview] | None = None,
        message_key: str | None = None,
    ) -> int:
        """Publishes one message; returns how many subscriptions got a copy.

        0 means it matched none (counted in ``stats().unmatched``). A full subscription
        refuses the whole publish, which then delivers nowhere. A message without a ``group``
        skips the subscriptions that require sessions.
        """
    def stats(self) -> TopicStats: ...

@final
class TopicStats:
    @property
    def published(self) -> int:
        """Messages published (committed publishes only)."""
    @property
    def unmatched(self) -> int:
        """Published messages that matched no subscription."""
    @property
    def subscriptions(self) -> int: ...
    def _asdict(self) -> dict[str, int]: ...
    def __eq__(self, value: object, /) -> bool: ...
    __hash__: None  # type: ignore[assignment]

@final
class Collator:
    """Releases a series that arrives out of order to its destination queue, in order.

    A series is the messages of one ``group``, numbered by ``sequence`` from 1. Holding and
    releasing happen in the sending commit: a crash loses or duplicates nothing, and a number
    sent again is recognised (``Collated.duplicate``). A completed series is remembered, so
    that a late resend is still a duplicate, until ``forget`` retires it (or the collator is
    deleted): give each run of work its own series name, or forget a series once no resend of
    it can come any more.
    """

    @property
    def name(self) -> str: ...
    @property
    def destination(self) -> Queue: ...
    def send(
        self,
        body: _Body,
        *,
        group: str,
        sequence: int,
        series_length: int | None = None,
        last: bool = False,
        label: str | None = None,
        content_type: str | None = None,
        priority: int | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        ttl: _Seconds | None = None,
        delay: _Seconds | None = None,
        visible_at: datetime | None = None,
        expires_at: datetime | None = None,
        properties: Mapping[str, _PropertyValue | bytearray | memoryview] | None = None,
        message_key: str | None = None,
    ) -> Collated:
        """Sends message ``sequence`` of series ``group``; held until the gap before it closes.

        ``series_length`` declares the series' length; ``last=True`` marks this message as
        its last. Numbers beyond a declared length, 0, or a length that contradicts the series
        raise ``InvalidArgumentError`` — also on a resend of a number the series has: it is
        not the same message, so it is not taken as a duplicate.
        """
    def held(self) -> int:
        """How many messages the collator holds now."""
    def forget(self, series: str) -> bool:
        """Forgets ``series``: its name starts a new series from 1 (``po-1`` #1 is then a new
        message, no longer a duplicate). Returns whether the collator knew it. Raises
        ``InvalidArgumentError`` while the collator holds messages of the series (they would
        be lost)."""
    def incomplete(self) -> list[SeriesGap]:
        """The series not yet complete (length unknown, or not all released)."""

@final
class Collated:
    @property
    def released(self) -> list[int]:
        """Ids in the destination of the messages this send released, in series order."""
    @property
    def duplicate(self) -> bool:
        """The series already had this number: nothing was stored."""
    def __eq__(self, value: object, /) -> bool: ...
    __hash__: None  # type: ignore[assignment]

@final
class SeriesGap:
    @property
    def series(self) -> str: ...
    @property
    def next(self) -> int:
        """The next number to release: the first missing one."""
    @property
    def length(self) -> int | None:
        """The series' length once declared, else ``None``."""
    @property
    def held(self) -> list[int]:
        """The numbers held beyond the gap, ascending."""
    def __eq__(self, value: object, /) -> bool: ...
    __hash__: None  # type: ignore[assignment]

@final
class ShutdownReport:
    @property
    def processed(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def dead_lettered(self) -> int: ...
    @property
    def lock_lost(self) -> int: ...
    @property
    def returned(self) -> int: ...
    @property
    def still_running(self) -> int: ...
    @property
    def finished(self) -> bool: ...
    @property
    def unsettled(self) -> int:
        """Messages the processor could not settle or return (e.g. the store closed under it)."""
    @property
    def forked(self) -> bool:
        """True when ``join`` or ``shutdown`` was called in a forked child, where the workers
        do not exist: nothing was stopped, waited for or written, ``finished`` is ``False`` and
        the counters are those at the fork."""

@final
class Processor:
    def __new__(
        cls,
        queue: Queue,
        handler: Callable[..., object],
        workers: int = 4,
        *,
        retry_delay: _Seconds | None = None,
        max_retry_delay: _Seconds | None = None,
        handler_timeout: _Seconds | None = None,
        max_auto_renew: _Seconds | None = None,
        prefetch: int = 0,
        autoscale: tuple[int, int] | None = None,
        drop_timeout: _Seconds | None = None,
        sessions: bool = False,
        transactional: bool = False,
        codec: str | Codec[Any] | None = None,
        messages_per_worker: int | None = None,
        check_interval: _Seconds | None = None,
        on_scale: Callable[[int], object] | None = None,
        reserve: int | None = None,
        on_error: Callable[[Message, BaseException], object] | None = None,
    ) -> Processor:
        """Runs ``handler(message)`` on ``workers`` threads for every message of ``queue``.

        ``transactional=True`` calls ``handler(message, tx)`` instead, ``tx`` a
        ``Transaction`` lent for the call: what the handler does with it (``tx.send``,
        ``tx.receive``, ...) commits together with the message's completion when it returns,
        and is discarded when it raises (the message is then retried or dead-lettered as for
        any failure). The processor commits or aborts ``tx``: ``commit``, ``abort`` and
        ``with tx:`` raise ``InvalidArgumentError``, and after the call it is ``"closed"``.

        ``codec`` (``"json"``, ``"pickle"`` or a codec object, as for ``TypedQueue``) makes
        the handler get a ``TypedMessage`` with the decoded ``value``; a body that does not
        decode never reaches it and is dead-lettered on its first delivery with reason
        ``"DecodeFailed"``, as in Rust and C.

        While the handler runs, ``message.lock_lost`` and ``message.cancelled`` tell whether
        its lock is gone or it should give up (see ``Message``). The handler's message works
        on the processor's lock, which the processor keeps renewing: ``mark_done`` /
        ``done_keys`` record and read checkpoints at once (in a transactional handler too, not
        with ``tx``), so a redelivery skips the work recorded; ``renew_lock`` renews it now;
        ``reply`` answers a request in the commit that completes the message (with a
        transactional handler, in ``tx``), and sends nothing if the handler raises.

        ``autoscale=(min_workers, max_workers)`` (``min_workers`` may be 0) resizes the pool
        every ``check_interval`` (default 5 s) to the backlog divided by
        ``messages_per_worker`` (default 20), plus ``reserve`` spare workers (default 0),
        within the bounds; all three need ``autoscale``, the first two must be positive
        (``InvalidArgumentError``). ``on_scale(workers)`` is called with the
        live worker count whenever it changes (start, autoscaling, stop), on a native thread;
        an exception it raises is logged to the ``postbox`` logger, not raised.

        A handler that raises fails its message (retried after ``retry_delay``, dead-lettered
        after the queue's ``max_deliveries`` with the exception's text), and the exception is
        logged to the ``postbox`` logger at WARNING with its traceback. ``on_error(message,
        exception)`` is then called on the worker thread, before the message is settled, with
        the ``Message`` the handler got (under a ``TypedMessage`` with ``codec``) and the
        exception; an exception it raises itself is logged at ERROR, not raised.

        ``sessions=True`` is session mode, for a queue that requires sessions: each worker
        holds one session at a time and handles its messages in order, so ``workers`` groups
        run in parallel and never one group on two workers. The mode must match the queue
        (``InvalidArgumentError`` otherwise). ``workers``, the autoscaler's bounds and
        ``reserve`` are at most 1024 (``InvalidArgumentError`` above).
        """
    @property
    def queue(self) -> Queue: ...
    @property
    def is_stopped(self) -> bool: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def workers(self) -> int: ...
    def stop(self) -> None: ...
    def stats(self) -> dict[str, int]: ...
    def join(self, timeout: _Seconds | None = None) -> ShutdownReport:
        """Waits up to ``timeout`` (``None``: until done) for the workers to finish after
        ``stop()``. In a forked child: returns at once a report with ``forked=True``."""
    def shutdown(self, timeout: _Seconds | None = None) -> ShutdownReport:
        """Stops taking messages and waits up to ``timeout`` (``None``: until done) for every
        running handler to return and its commit or abort to be applied; nothing is left locked
        when the report says ``finished``. Raises once it has finished before.

        In a forked child, where the workers do not exist, it stops nothing, waits for nothing
        and writes nothing: it returns at once a report with ``forked=True``,
        ``finished=False``, ``still_running=0`` and the counters as they were at the fork
        (every other call raises ``ForkedError``); the parent's processor runs on.
        """
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...

def _shutdown_all() -> None: ...
def _error_kinds() -> list[tuple[int, str]]:
    """Every error kind of the engine as ``(code, exception class name)`` (for tests)."""

@final
class AsyncReceive:
    """One receive in flight for ``postbox.aio`` (made by ``_receive_async``)."""

    def done(self) -> bool: ...
    def result(self) -> Message | None:
        """The locked message, ``None`` on timeout, or the store's error raised."""
    def cancel(self) -> bool:
        """Withdraws the receive; a message it got but nobody collected is abandoned."""

def _receive_async(
    queue: Queue, timeout: _Seconds | None, wake: Callable[[], object]
) -> AsyncReceive:
    """Starts a receive waited for by the driver thread; ``wake()`` is called when it resolves."""
