"""The exception classes of postbox, one per error kind of the Rust engine.

``PostboxError`` is the base; the mid-level classes group kinds a caller may handle together and
also derive from the matching builtin (``ValueError``, ``LookupError``, ``OSError``), so generic
handlers keep working. The native module raises the leaves; a kind it does not know maps to
``PostboxError``. Every instance carries ``code``: the stable number of the kind (the same as the
C API's status code).
"""

from __future__ import annotations

import queue as _queue

__all__ = [
    "PostboxError",
    "Empty",
    "LockLostError",
    "QueueFullError",
    "MessageTooLargeError",
    "NotFoundError",
    "QueueNotFoundError",
    "InUseError",
    "MessageNotFoundError",
    "InvalidArgumentError",
    "ConfigError",
    "StoreError",
    "StoreCorruptedError",
    "NotAStoreError",
    "IncompatibleVersionError",
    "AlreadyOpenError",
    "ClosedError",
    "ForkedError",
    "ConflictError",
    "UnsupportedError",
    "IoError",
    "StorageFullError",
    "OutcomeUnknownError",
    "CodecError",
    "InternalError",
]


class PostboxError(Exception):
    """Base class of every error postbox raises."""

    code: int = 0


class Empty(PostboxError, _queue.Empty):
    """Nothing arrived before the timeout (a ``queue.Empty``, as ``queue.Queue.get`` raises)."""

    code = 1


class LockLostError(PostboxError):
    """The message's lock expired, was released, or was taken over; the settle changed nothing.

    Also raised when a session's lock was lost (it expired and another receiver accepted the
    session, or it was released): ``message_id`` is set for a message's lock, ``group`` for a
    session's.
    """

    code = 2
    message_id: int
    group: str


class QueueFullError(PostboxError):
    """Sending would exceed the queue's ``max_messages`` or ``max_bytes`` quota."""

    code = 3
    queue: str
    limit: str


class MessageTooLargeError(PostboxError, ValueError):
    """The body is larger than the queue's ``max_message_size``."""

    code = 4
    size: int
    max_size: int


class NotFoundError(PostboxError, LookupError):
    """A queue or message does not exist."""

    code = 5


class QueueNotFoundError(NotFoundError):
    """The queue does not exist (or was deleted).

    Its own kind (code 18), so that "no such queue" never reads as "no such message"; still a
    ``NotFoundError`` (and a ``LookupError``) for handlers that treat both alike.
    """

    code = 18
    queue: str


class InUseError(PostboxError):
    """The queue cannot be deleted: something names it — another queue's ``forward_to``,
    ``forward_dead_letters_to`` or ``receipts_to``, a collator (its destination), or a job that
    is not done (its continuation). ``queue`` is the queue, ``used_by`` what uses it; remove
    that use first."""

    code = 21
    queue: str
    used_by: str


class MessageNotFoundError(NotFoundError):
    """The message does not exist."""

    message_id: int


class InvalidArgumentError(PostboxError, ValueError):
    """An argument or the state of an object was rejected (bad name, priority, settled message)."""

    code = 6


class ConfigError(InvalidArgumentError):
    """Contradictory store options (e.g. multi_process with durability="none")."""

    code = 15


class StoreError(PostboxError):
    """A problem with the store file or its handle."""


class StoreCorruptedError(StoreError):
    """The file is damaged."""

    code = 7


class NotAStoreError(StoreError):
    """The file exists but is not a postbox store."""

    code = 11


class IncompatibleVersionError(StoreError):
    """The store was written by a newer, incompatible version of postbox."""

    code = 12


class AlreadyOpenError(StoreError):
    """Another process holds the store open in single-process mode (or this process holds it
    already; or, in a forked child, the parent does); also raised by ``Store.compact()`` when it
    could not have the store to itself. The message says what to do in Python's terms: use the
    same ``postbox.Store`` object within a process, and open the store with
    ``multi_process=True`` in every process that shares it (in a forked child, a new one)."""

    code = 13


class ClosedError(StoreError):
    """The store was closed."""

    code = 9


class ForkedError(ClosedError):
    """The handle was inherited across ``fork()``: it belongs to the process that opened it.

    Raised in a forked child (``os.fork()``, ``multiprocessing``'s "fork" start method, prefork
    servers) by every call on a store, queue, message, transaction or processor that the parent
    opened; nothing was written. The store is, to this process, as good as closed: open it again
    in the child (with ``multi_process=True`` if the parent keeps it open). ``opened_by`` is the
    pid that opened the store, ``current`` this process's pid.
    """

    code = 19
    opened_by: int
    current: int


class ConflictError(PostboxError):
    """A transaction's commit found an application table row that its ``increment`` or
    ``put_if`` read changed by another commit since: nothing of the transaction was applied
    (its received messages are back in their queues). Run the transaction again. ``table`` and
    ``key`` name the row.
    """

    code = 20
    table: str
    key: bytes


class UnsupportedError(PostboxError, NotImplementedError):
    """This build of the module leaves out what the call needs: it was built without the cargo
    feature ``feature`` (``"admin"`` for ``Store.serve_admin``, ``"bridge"`` for
    ``Store.bridge``). The message gives the build option that adds it; ``postbox.FEATURES``
    lists the features a module has. Nothing was done.
    """

    code = 22
    feature: str


class IoError(StoreError, OSError):
    """The operating system refused an operation (permissions, a read-only file system, a
    missing directory, a failing disk, ...). ``errno`` is the system's error number
    (``errno.EACCES``, ``errno.EROFS``, ...) and the message names the file postbox was working
    on."""

    code = 8


class StorageFullError(IoError):
    """The disk is full."""

    code = 16


class OutcomeUnknownError(PostboxError):
    """A commit failed after it may have reached the disk: it may or may not have applied."""

    code = 14


class CodecError(PostboxError):
    """A typed body could not be encoded or decoded."""

    code = 17


class InternalError(PostboxError):
    """A bug in postbox was caught at the boundary; the store stays usable."""

    code = 10
