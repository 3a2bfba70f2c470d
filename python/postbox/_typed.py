"""Typed bodies: Python objects sent and received through a codec, in the typed-body envelope
that Rust and C read too (docs/typed-bodies.md in the repository).

A typed body is a 6-byte header — the magic ``b"\\xffPBT"``, the format version (1) and a codec
id — followed by the payload the codec wrote. JSON (codec 1) is the default and what every
language reads; pickle (codec 3) is Python only and must be asked for; applications bring their
own codecs with ids 128 to 255. ::

    orders = postbox.TypedQueue(store.queue("orders"))          # JSON
    orders.send({"id": 42, "item": "tea"}, label="new")
    with orders.receive(timeout=1) as msg:                      # a TypedMessage
        print(msg.value["item"])

A body that does not decode — no envelope, another codec, an unknown version, a payload the
codec refuses — never will, so the typed receive and the typed processor move it to the
dead-letter queue with reason ``"DecodeFailed"`` on its first delivery, as Rust and C do.

Pure Python over the bytes API of the native module.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, Protocol, TypeVar, Union, overload

from ._errors import CodecError, InvalidArgumentError, LockLostError
from ._postbox import Message, Processor, Queue, Transaction

__all__ = [
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

T = TypeVar("T")
_Bytes = Union[bytes, bytearray, memoryview]
_Seconds = Union[float, timedelta]

#: The first four bytes of every typed body.
TYPED_BODY_MAGIC: bytes = b"\xffPBT"
#: The envelope format this version writes and the only one it reads.
TYPED_BODY_VERSION: int = 1
#: Bytes before the payload: magic (4), version (1), codec id (1).
TYPED_BODY_HEADER_LEN: int = 6
#: JSON text in UTF-8: readable by Rust (``Queue::typed_json``), C and Python.
CODEC_JSON: int = 1
#: bincode 2, written by Rust's ``Queue::typed``: Rust only.
CODEC_BINCODE: int = 2
#: Python's pickle: Python only, and only where the reader opted in.
CODEC_PICKLE: int = 3
#: The first codec id left to applications (128 to 255); 0 and 4 to 127 are reserved.
FIRST_USER_CODEC: int = 128
#: Dead-letter reason of a message whose body a typed receive or processor could not decode.
REASON_DECODE_FAILED: str = "DecodeFailed"

_NAMES = {CODEC_JSON: "JSON", CODEC_BINCODE: "bincode", CODEC_PICKLE: "pickle"}


def _codec_name(codec: int) -> str:
    if codec in _NAMES:
        return _NAMES[codec]
    return "a user codec" if codec >= FIRST_USER_CODEC else "reserved"


def _is_assigned(codec: int) -> bool:
    return codec in _NAMES or FIRST_USER_CODEC <= codec <= 255


def _check_codec_id(codec: object, what: str) -> int:
    if isinstance(codec, bool) or not isinstance(codec, int):
        raise TypeError(f"{what} must be an int, not {type(codec).__name__}")
    if not 0 <= codec <= 255:
        raise InvalidArgumentError(f"{what} {codec} is not a codec id (0 to 255)")
    if not _is_assigned(codec):
        raise InvalidArgumentError(
            f"{what} {codec} is reserved (assigned: 1 JSON, 2 bincode, 3 pickle; 128-255 user)"
        )
    return codec


def wrap_typed_body(codec: int, payload: _Bytes) -> bytes:
    """The typed body of ``payload`` (bytes a codec wrote) for codec id ``codec``.

    Raises ``InvalidArgumentError`` (a ``ValueError``) for a reserved codec id (0, 4 to 127)
    and ``TypeError`` for a codec that is not an int.
    """
    _check_codec_id(codec, "codec")
    return TYPED_BODY_MAGIC + bytes((TYPED_BODY_VERSION, codec)) + bytes(payload)


def parse_typed_body(body: _Bytes) -> tuple[int, bytes]:
    """Takes a typed body apart: ``(codec id, payload)``.

    Raises ``CodecError`` when ``body`` is not a typed body this version reads: no magic, cut
    inside the header, a format version other than 1, or a reserved codec id. An empty payload
    is valid here: whether it decodes is the codec's business.
    """
    data = bytes(body)
    if len(data) < TYPED_BODY_HEADER_LEN:
        if len(data) >= 4 and data[:4] == TYPED_BODY_MAGIC:
            raise CodecError(
                f"the typed body is truncated: {len(data)} bytes, shorter than its 6-byte header"
            )
        raise CodecError(_NOT_TYPED)
    if data[:4] != TYPED_BODY_MAGIC:
        raise CodecError(_NOT_TYPED)
    version, codec = data[4], data[5]
    if version != TYPED_BODY_VERSION:
        raise CodecError(
            f"typed-body format version {version} is not supported "
            f"(this postbox reads version {TYPED_BODY_VERSION})"
        )
    if not _is_assigned(codec):
        raise CodecError(
            f"codec id {codec} is reserved (assigned: 1 JSON, 2 bincode, 3 pickle; 128-255 user)"
        )
    return codec, data[TYPED_BODY_HEADER_LEN:]


_NOT_TYPED = "the body is not a typed body (it does not start with the typed-body magic)"


class Codec(Protocol[T]):
    """What ``TypedQueue`` needs of a codec: an ``id`` and two functions.

    A user codec has an ``id`` from 128 to 255 (the same id wherever the bodies are read),
    ``encode(obj) -> bytes`` and ``decode(data) -> obj``. Any exception either raises is
    reported as ``CodecError``; an undecodable body is dead-lettered.
    """

    @property
    def id(self) -> int: ...
    def encode(self, obj: T, /) -> bytes: ...
    def decode(self, data: bytes, /) -> T: ...


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or infinity)")


class JsonCodec:
    """JSON text in UTF-8 (codec 1), the default: what Rust's ``typed_json`` queues and C read.

    Objects are what ``json`` handles (dict with str keys, list, str, int, float, bool, None);
    ``default`` converts others when encoding (as in ``json.dumps``), ``object_hook`` turns
    decoded dicts into objects (as in ``json.loads``). The text is compact, keeps non-ASCII
    characters as UTF-8, and refuses NaN and infinities both ways, which other JSON readers
    would refuse.
    """

    id: int = CODEC_JSON

    def __init__(
        self,
        *,
        default: Callable[[Any], Any] | None = None,
        object_hook: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self._default = default
        self._object_hook = object_hook

    def encode(self, obj: Any, /) -> bytes:
        text = json.dumps(
            obj,
            ensure_ascii=False,
            separators=(",", ":"),
            allow_nan=False,
            default=self._default,
        )
        return text.encode("utf-8")

    def decode(self, data: bytes, /) -> Any:
        return json.loads(
            data.decode("utf-8"),
            object_hook=self._object_hook,
            parse_constant=_reject_constant,
        )

    def __repr__(self) -> str:
        return "JsonCodec()"


class PickleCodec:
    """Python's pickle (codec 3): any picklable object, read by Python only.

    Opt-in, because unpickling runs whatever code the data names: use it only on queues whose
    every producer you trust. ``protocol`` is the pickle protocol to write (readers need a
    Python that knows it).
    """

    id: int = CODEC_PICKLE

    def __init__(self, protocol: int = pickle.DEFAULT_PROTOCOL) -> None:
        self._protocol = protocol

    def encode(self, obj: Any, /) -> bytes:
        return pickle.dumps(obj, protocol=self._protocol)

    def decode(self, data: bytes, /) -> Any:
        return pickle.loads(data)

    def __repr__(self) -> str:
        return f"PickleCodec(protocol={self._protocol})"


def _resolve(codec: object) -> Codec[Any]:
    if isinstance(codec, str):
        if codec == "json":
            return JsonCodec()
        if codec == "pickle":
            return PickleCodec()
        raise InvalidArgumentError(
            f'codec must be "json", "pickle" or a codec object, not {codec!r}'
        )
    if isinstance(codec, (JsonCodec, PickleCodec)):
        return codec
    for attr in ("id", "encode", "decode"):
        if not hasattr(codec, attr):
            raise TypeError(
                f"a codec needs id, encode and decode; {type(codec).__name__} has no {attr}"
            )
    cid = getattr(codec, "id")
    if isinstance(cid, bool) or not isinstance(cid, int):
        raise TypeError(f"a codec's id must be an int, not {type(cid).__name__}")
    if not FIRST_USER_CODEC <= cid <= 255:
        raise InvalidArgumentError(
            f"a user codec's id is 128 to 255, not {cid} (JSON and pickle are "
            f'codec="json" and codec="pickle")'
        )
    if not (callable(getattr(codec, "encode")) and callable(getattr(codec, "decode"))):
        raise TypeError("a codec's encode and decode must be callable")
    return codec  # type: ignore[return-value]


def _kind(codec: Codec[Any]) -> str:
    return _codec_name(codec.id)


class TypedMessage(Generic[T]):
    """A received message with its decoded ``value``; settled like the ``Message`` it wraps.

    ``with typed.receive() as msg:`` completes it on success and abandons it on an exception.
    ``message`` is the underlying ``postbox.Message`` (every property, the raw body).
    """

    __slots__ = ("_message", "_value")

    def __init__(self, message: Message, value: T) -> None:
        self._message = message
        self._value = value

    @property
    def value(self) -> T:
        """The decoded body."""
        return self._value

    @property
    def message(self) -> Message:
        """The underlying ``postbox.Message`` (every property, the raw body)."""
        return self._message

    @property
    def id(self) -> int:
        """The message's store-wide id."""
        return self._message.id

    @property
    def label(self) -> str | None:
        """The message's label, if set."""
        return self._message.label

    @property
    def correlation_id(self) -> str | None:
        """The message's correlation id, if set."""
        return self._message.correlation_id

    @property
    def reply_to(self) -> str | None:
        """The queue replies go to, if set."""
        return self._message.reply_to

    @property
    def delivery_count(self) -> int:
        """How many times the message has been delivered (1 on its first receive)."""
        return self._message.delivery_count

    @property
    def properties(self) -> dict[str, str | bytes]:
        """The message's user properties (a new dict each time)."""
        return self._message.properties

    def complete(self) -> None:
        """Completes the message (``Message.complete``)."""
        self._message.complete()

    def abandon(self, delay: _Seconds | None = None) -> None:
        """Gives the message back for another delivery, after ``delay`` if given."""
        self._message.abandon(delay)

    def dead_letter(self, reason: str, description: str = "") -> None:
        """Moves the message to the dead-letter queue with ``reason``."""
        self._message.dead_letter(reason, description)

    def defer(self) -> None:
        """Defers the message: only ``receive_by_id`` takes it again (``Message.defer``)."""
        self._message.defer()

    def renew_lock(self) -> datetime:
        """Extends the lock by the queue's ``lock_duration``; returns the new expiry."""
        return self._message.renew_lock()

    def mark_done(self, keys: str | Iterable[str]) -> datetime:
        """Records progress keys a redelivery skips (``Message.mark_done``: at once, under the
        lock the message is held with, a processor's included); returns the new expiry."""
        return self._message.mark_done(keys)

    def done_keys(self) -> set[str]:
        """The progress keys recorded so far (``Message.done_keys``)."""
        return self._message.done_keys()

    def reply(self, body: bytes | bytearray | memoryview | str, **props: Any) -> int:
        """Answers the message with a raw ``body`` (``Message.reply``: in a processor handler,
        sent with the completion); returns the reply's id."""
        return self._message.reply(body, **props)

    @property
    def lock_lost(self) -> bool:
        """In a processor handler: whether the lock is gone (``Message.lock_lost``)."""
        return self._message.lock_lost

    @property
    def cancelled(self) -> bool:
        """In a processor handler: whether to give up (``Message.cancelled``)."""
        return self._message.cancelled

    def __enter__(self) -> TypedMessage[T]:
        self._message.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        return self._message.__exit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return f"TypedMessage(id={self.id}, value={self._value!r})"


class TypedQueue(Generic[T]):
    """A typed view of ``queue``: objects in, objects out, through ``codec``.

    ``codec`` is ``"json"`` (the default: JSON, readable by Rust and C too), ``"pickle"``
    (opt-in, Python only; see ``PickleCodec``) or a codec object (``JsonCodec(...)``,
    ``PickleCodec(...)``, or a user codec with an ``id`` from 128 to 255). The view reads only
    bodies of its own codec. The queue stays an ordinary queue underneath (``queue``), as a
    text wrapper keeps its buffer.

    Receives raise ``CodecError`` for a body that does not decode, after moving it to the
    dead-letter queue with reason ``"DecodeFailed"`` (on its first delivery: it would never
    decode). Encoding errors raise ``CodecError`` and send nothing.
    """

    @overload
    def __init__(
        self: TypedQueue[Any], queue: Queue, codec: Literal["json", "pickle"] = "json"
    ) -> None: ...
    @overload
    def __init__(self, queue: Queue, codec: Codec[T]) -> None: ...
    def __init__(self, queue: Queue, codec: str | Codec[Any] = "json") -> None:
        if not isinstance(queue, Queue):
            raise TypeError(f"queue must be a postbox.Queue, not {type(queue).__name__}")
        self._queue = queue
        self._codec: Codec[T] = _resolve(codec)

    @property
    def queue(self) -> Queue:
        """The queue underneath."""
        return self._queue

    @property
    def codec(self) -> Codec[T]:
        """The codec that encodes sends and decodes receives."""
        return self._codec

    def encode(self, obj: T) -> bytes:
        """The typed body of ``obj`` (header and payload), e.g. for ``Transaction.send``.

        Raises ``CodecError`` when the codec cannot encode it.
        """
        try:
            payload = self._codec.encode(obj)
        except Exception as e:
            raise CodecError(f"{_kind(self._codec)} encoding failed: {e}") from e
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise CodecError(
                f"the codec's encode returned {type(payload).__name__}, not bytes"
            )
        return wrap_typed_body(self._codec.id, payload)

    def decode(self, body: _Bytes | Message) -> T:
        """The object in ``body`` (a typed body of this view's codec, or a ``Message``).

        Raises ``CodecError`` when it is not one, or when the codec cannot decode the payload.
        Moves nothing: only receives dead-letter.
        """
        data = body.body if isinstance(body, Message) else body
        codec, payload = parse_typed_body(data)
        if codec != self._codec.id:
            raise CodecError(
                f"the body is encoded with codec {codec} ({_codec_name(codec)}), "
                f"not with codec {self._codec.id} ({_kind(self._codec)})"
            )
        try:
            return self._codec.decode(payload)
        except Exception as e:
            raise CodecError(f"{_kind(self._codec)} decoding failed: {e!r}") from e

    def send(self, obj: T, **options: Any) -> int:
        """Sends ``obj``; returns its id once it is durable.

        ``options`` are the keywords of ``Queue.send`` (``label``, ``priority``, ``delay``, ...).
        """
        return self._queue.send(self.encode(obj), **options)

    def send_batch(self, objs: Iterable[T]) -> list[int]:
        """Sends every object atomically, in one commit; nothing if one does not encode."""
        return self._queue.send_batch([self.encode(o) for o in objs])

    def send_in(self, tx: Transaction, obj: T, **options: Any) -> None:
        """Sends ``obj`` when ``tx`` commits (keywords of ``Transaction.send``)."""
        tx.send(self._queue, self.encode(obj), **options)

    def receive(self, timeout: _Seconds | None = None) -> TypedMessage[T]:
        """Locks the next message, waiting up to ``timeout`` (``None``: forever), and decodes it.

        Raises ``Empty`` when nothing arrives, and ``CodecError`` for a body that does not
        decode, which is moved to the dead-letter queue (reason ``"DecodeFailed"``) first.
        """
        return self._typed(self._queue.receive(timeout))

    def receive_nowait(self) -> TypedMessage[T]:
        """As ``receive`` without waiting."""
        return self._typed(self._queue.receive_nowait())

    def peek(self, timeout: _Seconds | None = None) -> TypedMessage[T] | None:
        """The next message decoded, without locking it; ``None`` if none.

        Raises ``CodecError`` for a body that does not decode; nothing is moved.
        """
        msg = self._queue.peek(timeout)
        return None if msg is None else TypedMessage(msg, self.decode(msg))

    def processor(
        self, handler: Callable[[TypedMessage[T]], object], workers: int = 4, **options: Any
    ) -> Processor:
        """A ``postbox.Processor`` whose handler gets ``TypedMessage`` objects.

        ``options`` are the keywords of ``Processor``. A body that does not decode never
        reaches ``handler``: it is dead-lettered with reason ``"DecodeFailed"``.
        """

        return Processor(self._queue, handler, workers, codec=self._codec, **options)

    def _decoded_or_dead_lettered(self, msg: Message) -> tuple[bool, Any]:
        """For a processor: ``(True, value)``, or ``(False, None)`` once the message was
        marked for the dead-letter queue (``DecodeFailed``) because its body does not decode."""
        try:
            return True, self.decode(msg)
        except CodecError as e:
            msg.dead_letter(REASON_DECODE_FAILED, str(e))
            return False, None

    def _typed(self, msg: Message) -> TypedMessage[T]:
        try:
            value = self.decode(msg)
        except CodecError as e:
            text = str(e)
            try:
                msg.dead_letter(REASON_DECODE_FAILED, text)
            except LockLostError:
                pass  # another receiver has it now; the body is still what to report
            except Exception as failed:
                raise CodecError(
                    f"{text}; moving the message to the dead-letter queue failed too: {failed}"
                ) from e
            raise
        return TypedMessage(msg, value)

    def __repr__(self) -> str:
        return f"TypedQueue({self._queue.name!r}, codec={self._codec!r})"


def _typed_handler(
    queue: Queue, codec: str | Codec[Any], handler: Callable[..., object], transactional: bool
) -> Callable[..., object]:
    """The handler a ``Processor(..., codec=...)`` runs: decodes each body and calls
    ``handler`` with a ``TypedMessage`` (and the transaction, in transactional mode); a body
    that does not decode is dead-lettered with reason ``"DecodeFailed"`` instead."""
    view: TypedQueue[Any] = TypedQueue(queue, codec)  # type: ignore[arg-type]

    if transactional:

        def run_tx(msg: Message, tx: Transaction) -> object:
            ok, value = view._decoded_or_dead_lettered(msg)
            return handler(TypedMessage(msg, value), tx) if ok else None

        return run_tx

    def run(msg: Message) -> object:
        ok, value = view._decoded_or_dead_lettered(msg)
        return handler(TypedMessage(msg, value)) if ok else None

    return run
