"""Workloads A and B of the comparison harness (workload C), driven through `import postbox`.

    python workload.py --workload A|B --class per-message|batched --dir DIR
                       [--count 20000] [--cap 15] [--seconds 10] [--body 1024]
                       [--producers 4] [--consumers 4] [--depth 100] [--batch 100]

Prints one JSON line per phase with the fields of the harness (system, class, workload, phase,
msgs, secs, msgs_per_s, depth, durability), the same loops as peers.py runs on the peers:

A (burst): `count` durable sends of `body` bytes from one thread, then receive+complete of all of
them; per message, then the same count again through the consume loop (complete the held message
and lock the next in one commit). A phase still running after `cap` seconds stops and reports the rate over what it did.
B (steady state): `producers` + `consumers` Python threads for `seconds` after 1 s of warm-up,
producers holding the backlog near `depth`. postbox releases the GIL during every commit, so
the threads' commits share fsyncs (group commit).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import postbox

SYSTEM = "postbox-python"
DURABILITY = "durability=immediate: fsync per commit, concurrent commits grouped"


class Client:
    def __init__(self, queue: postbox.Queue, body: bytes) -> None:
        self.q = queue
        self.body = body
        # The batch each consumer thread holds until its next call settles it.
        self.local = threading.local()

    def send(self) -> None:
        self.q.send(self.body)

    def send_many(self, n: int) -> None:
        self.q.send_batch([self.body] * n)

    def receive_complete(self) -> int:
        try:
            msg = self.q.receive(timeout=0.1)
        except postbox.Empty:
            return 0
        msg.complete()
        return 1

    def receive_complete_many(self, n: int) -> int:
        # Completes the batch held since the last call and locks the next in one commit.
        held = getattr(self.local, "held", [])
        self.local.held = self.q.complete_batch_and_receive(held, n, timeout=0.1)
        return len(self.local.held)

    def finish(self) -> None:
        held = getattr(self.local, "held", [])
        if held:
            self.q.complete_batch(held)
        self.local.held = []


def emit(args: argparse.Namespace, phase: str, msgs: int, secs: float, depth: str, **extra: object) -> None:
    line = {
        "system": SYSTEM,
        "class": args.cls,
        "workload": args.workload,
        "phase": phase,
        "msgs": msgs,
        "secs": secs,
        "msgs_per_s": msgs / secs if secs > 0 else 0.0,
        "depth": depth,
        "durability": DURABILITY,
    }
    line.update(extra)
    print(json.dumps(line), flush=True)


def workload_a(args: argparse.Namespace, c: Client) -> None:
    batched = args.cls == "batched"
    t = time.monotonic()
    sent = 0
    while sent < args.count and time.monotonic() - t < args.cap:
        if batched:
            k = min(args.batch, args.count - sent)
            c.send_many(k)
            sent += k
        else:
            c.send()
            sent += 1
    send_s = time.monotonic() - t
    capped = sent < args.count
    emit(args, "send", sent, send_s, f"0→{sent}" + (f" (capped at {args.cap:g} s)" if capped else ""))
    t = time.monotonic()
    got = 0
    while got < sent and time.monotonic() - t < args.cap:
        got += c.receive_complete_many(min(args.batch, sent - got)) if batched else c.receive_complete()
    c.finish()
    recv_s = time.monotonic() - t
    emit(
        args, "receive+complete", got, recv_s,
        f"{sent}→{sent - got}" + (f" (capped at {args.cap:g} s)" if got < sent else ""),
    )
    emit(args, "total", sent + got, send_s + recv_s, f"0→{sent}→{sent - got}")
    if not batched:
        consume_loop(args, c, sent, got)


def consume_loop(args: argparse.Namespace, c: Client, sent: int, consumed: int) -> None:
    """Per message, the way a processor consumes: each call completes the message held and
    locks the next in one commit (one commit per consumed message instead of two). The queue is
    first refilled, untimed, to the `sent` messages the receive+complete phase started from."""
    while consumed > 0:
        k = min(100, consumed)
        c.send_many(k)
        consumed -= k
    q = c.q
    t = time.monotonic()
    got = 0
    held: list[postbox.Message] = []
    while got < sent and time.monotonic() - t < args.cap:
        held = q.complete_batch_and_receive(held, 1, timeout=10)
        if not held:
            raise RuntimeError("receive timed out")
        got += 1
    q.complete_batch(held)
    secs = time.monotonic() - t
    emit(
        args, "consume loop", got, secs,
        f"{sent}→{sent - got}" + (f" (capped at {args.cap:g} s)" if got < sent else ""),
    )


def workload_b(args: argparse.Namespace, c: Client) -> None:
    batched = args.cls == "batched"
    batch = max(1, args.depth // args.producers) if batched else 1
    state = {"depth": 0, "done": 0}
    lock = threading.Lock()
    stop = threading.Event()
    measuring = threading.Event()
    errors: list[str] = []

    def producer() -> None:
        try:
            while not stop.is_set():
                if state["depth"] >= args.depth:
                    time.sleep(0.0001)
                    continue
                if batched:
                    c.send_many(batch)
                else:
                    c.send()
                with lock:
                    state["depth"] += batch
        except Exception as e:  # noqa: BLE001 - reported in the JSON line
            errors.append(repr(e))

    def consumer() -> None:
        try:
            while not stop.is_set():
                n = c.receive_complete_many(batch) if batched else c.receive_complete()
                with lock:
                    state["depth"] -= n
                    if measuring.is_set():
                        state["done"] += n
            c.finish()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=producer) for _ in range(args.producers)]
    threads += [threading.Thread(target=consumer) for _ in range(args.consumers)]
    for th in threads:
        th.start()
    time.sleep(1.0)
    measuring.set()
    t = time.monotonic()
    samples = []
    while time.monotonic() - t < args.seconds:
        time.sleep(0.01)
        samples.append(state["depth"])
    measuring.clear()
    secs = time.monotonic() - t
    done = state["done"]
    stop.set()
    for th in threads:
        th.join(timeout=30)
    extra: dict[str, object] = {"producers": args.producers, "consumers": args.consumers, "batch": batch}
    if errors:
        extra["errors"] = errors[:3]
    emit(args, "steady", done, secs, f"~{sum(samples) // max(1, len(samples))}", **extra)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, choices=["A", "B"])
    ap.add_argument("--class", dest="cls", default="per-message", choices=["per-message", "batched"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--count", type=int, default=20_000)
    ap.add_argument("--cap", type=float, default=15.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--batch", type=int, default=100)
    args = ap.parse_args()
    with postbox.Store(os.path.join(args.dir, "bench.postbox")) as store:
        c = Client(store.queue("bench"), os.urandom(args.body))
        (workload_a if args.workload == "A" else workload_b)(args, c)


if __name__ == "__main__":
    main()
