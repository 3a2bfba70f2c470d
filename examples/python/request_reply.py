"""Request/reply: a client sends requests carrying reply_to and a correlation id; a server
thread answers each with Message.reply; the client takes each answer by its correlation id.

    python examples/python/request_reply.py [STORE_PATH]

The client sends all its requests first and then collects the replies in reverse order, to
show that receive_by_correlation_id picks its own reply out of a shared reply queue whatever
the order they arrived in. Exits 0 when every request got its own answer.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import uuid
from pathlib import Path

import postbox

REQUESTS = 5


def server(store: postbox.Store, stop: threading.Event) -> None:
    """Answers every request of the "square" queue until told to stop."""
    requests = store.queue("square")
    while not stop.is_set():
        try:
            msg = requests.receive(timeout=0.1)
        except postbox.Empty:
            continue
        n = int(msg.text)
        # The reply goes to msg.reply_to with msg's correlation id; completing the request
        # and sending the reply are one commit.
        msg.reply(str(n * n), label="squared")


def run(path: Path) -> None:
    with postbox.Store(path) as store:
        requests = store.queue("square")
        replies = store.queue("square-replies")
        stop = threading.Event()
        thread = threading.Thread(target=server, args=(store, stop), daemon=True)
        thread.start()
        try:
            sent: dict[str, int] = {}
            for n in range(1, REQUESTS + 1):
                cid = uuid.uuid4().hex
                requests.send(str(n), label="square", reply_to=replies.name, correlation_id=cid)
                sent[cid] = n
                print(f"request {n} sent, correlation_id={cid[:8]}…")

            for cid, n in reversed(list(sent.items())):
                with replies.receive_by_correlation_id(cid, timeout=10) as reply:
                    print(f"reply to {n}: {reply.text} ({reply!r})")
                    assert reply.correlation_id == cid, reply
                    assert reply.label == "squared", reply
                    assert int(reply.text) == n * n, reply
        finally:
            stop.set()
            thread.join(timeout=5)
        assert len(requests) == 0 and len(replies) == 0
        print(f"ok: {REQUESTS} requests answered, each reply matched by its correlation id")

        # The same exchange in one call: Queue.request sends with a temporary reply queue and
        # a fresh correlation id, and waits for the answer.
        thread = threading.Thread(target=server, args=(store, stop), daemon=True)
        stop.clear()
        thread.start()
        try:
            answer = requests.request(b"12", timeout=10)
            print(f"Queue.request(b'12') -> {answer.text}")
            assert answer.text == "144"
        finally:
            stop.set()
            thread.join(timeout=5)


def main() -> int:
    if len(sys.argv) > 1:
        run(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as d:
            run(Path(d) / "rpc.postbox")
    return 0


if __name__ == "__main__":
    sys.exit(main())
