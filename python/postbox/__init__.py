"""postbox: a transactional, durable message queue in one local file.

MSMQ / Azure Service Bus semantics without a server::

    import postbox

    with postbox.Store("app.postbox") as store:
        jobs = store.queue("jobs", lock_duration=30)
        jobs.send(b"resize 42.png", label="resize", priority=5)
        with jobs.receive(timeout=1) as msg:   # completed on success, abandoned on exception
            print(msg.label, msg.body)

Receives follow the stdlib ``queue`` module: timeouts are float seconds (or ``timedelta``),
``None`` waits forever, and ``postbox.Empty`` (a ``queue.Empty``) is raised when nothing arrives.
Every call that waits or touches the disk releases the GIL.

A store and everything obtained from it (queues, messages, transactions, processors) belong to
the process that opened it. In a child made by ``fork()`` (``os.fork``, the "fork" start method
of ``multiprocessing``, prefork servers) every call on them raises ``postbox.ForkedError`` (a
``ClosedError``) and writes nothing; closing, leaving a ``with`` block and garbage collection
there only let go of the handles. The child opens the store itself, with ``multi_process=True``
when the parent keeps it open.
"""

from __future__ import annotations

import atexit

from . import _postbox
from ._errors import (
    AlreadyOpenError,
    ClosedError,
    CodecError,
    ConfigError,
    ConflictError,
    Empty,
    ForkedError,
    IncompatibleVersionError,
    InUseError,
    InternalError,
    InvalidArgumentError,
    IoError,
    LockLostError,
    MessageNotFoundError,
    MessageTooLargeError,
    NotAStoreError,
    NotFoundError,
    OutcomeUnknownError,
    PostboxError,
    QueueFullError,
    QueueNotFoundError,
    StorageFullError,
    StoreCorruptedError,
    StoreError,
    UnsupportedError,
)
from ._postbox import (
    DEFAULT_PRIORITY,
    FEATURES,
    MAX_PRIORITY,
    MIN_PRIORITY,
    REASON_DESTINATION_MISSING,
    REASON_MAX_DELIVERIES,
    REASON_TTL_EXPIRED,
    RECEIPT_AT,
    RECEIPT_LABEL,
    RECEIPT_MESSAGE_ID,
    RECEIPT_OUTCOME,
    RECEIPT_QUEUE,
    RECEIPT_REASON,
    AdminServer,
    Bridge,
    Browse,
    Collated,
    Collator,
    Consumer,
    Job,
    JobPiece,
    JobProgress,
    Message,
    Processor,
    Queue,
    QueueInfo,
    QueueStats,
    Sent,
    SeriesGap,
    Session,
    ShutdownReport,
    Store,
    Table,
    Topic,
    TopicStats,
    Transaction,
    TransactionTable,
)
from ._typed import (
    CODEC_BINCODE,
    CODEC_JSON,
    CODEC_PICKLE,
    FIRST_USER_CODEC,
    REASON_DECODE_FAILED,
    TYPED_BODY_HEADER_LEN,
    TYPED_BODY_MAGIC,
    TYPED_BODY_VERSION,
    Codec,
    JsonCodec,
    PickleCodec,
    TypedMessage,
    TypedQueue,
    parse_typed_body,
    wrap_typed_body,
)

__version__: str = _postbox.__version__

# Processor workers are native threads that call into Python: stop them while the interpreter
# can still run their handlers (each waits up to its drop_timeout).
atexit.register(_postbox._shutdown_all)

__all__ = [
    "DEFAULT_PRIORITY",
    "FEATURES",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "REASON_DESTINATION_MISSING",
    "REASON_MAX_DELIVERIES",
    "REASON_TTL_EXPIRED",
    "RECEIPT_AT",
    "RECEIPT_LABEL",
    "RECEIPT_MESSAGE_ID",
    "RECEIPT_OUTCOME",
    "RECEIPT_QUEUE",
    "RECEIPT_REASON",
    "AdminServer",
    "AlreadyOpenError",
    "Bridge",
    "Browse",
    "ClosedError",
    "CodecError",
    "Collated",
    "Collator",
    "ConfigError",
    "ConflictError",
    "Consumer",
    "Empty",
    "ForkedError",
    "IncompatibleVersionError",
    "InUseError",
    "InternalError",
    "InvalidArgumentError",
    "IoError",
    "Job",
    "JobPiece",
    "JobProgress",
    "LockLostError",
    "Message",
    "Processor",
    "MessageNotFoundError",
    "MessageTooLargeError",
    "NotAStoreError",
    "NotFoundError",
    "OutcomeUnknownError",
    "PostboxError",
    "Queue",
    "QueueFullError",
    "QueueInfo",
    "QueueNotFoundError",
    "QueueStats",
    "Sent",
    "SeriesGap",
    "Session",
    "ShutdownReport",
    "StorageFullError",
    "Store",
    "StoreCorruptedError",
    "StoreError",
    "Table",
    "Topic",
    "TopicStats",
    "Transaction",
    "TransactionTable",
    "UnsupportedError",
    "__version__",
    # Typed bodies (postbox._typed).
    "CODEC_BINCODE",
    "CODEC_JSON",
    "CODEC_PICKLE",
    "FIRST_USER_CODEC",
    "REASON_DECODE_FAILED",
    "TYPED_BODY_HEADER_LEN",
    "TYPED_BODY_MAGIC",
    "TYPED_BODY_VERSION",
    "Codec",
    "JsonCodec",
    "PickleCodec",
    "TypedMessage",
    "TypedQueue",
    "parse_typed_body",
    "wrap_typed_body",
]
