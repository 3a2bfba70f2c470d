"""Workloads A and B of the comparison harness, run on the peers postbox users pick instead.

    python peers.py --peer NAME --workload A|B --class per-message|batched --dir DIR
                    [--count 20000] [--cap 15] [--seconds 10] [--body 1024]
                    [--producers 4] [--consumers 4] [--depth 100] [--batch 100]
                    [--redis-port P] [--amqp-port P]

Prints one JSON line per phase (the same fields as the Rust `postbox-compare` binary):
system, class, workload, phase, msgs, secs, msgs_per_s, depth, durability.

A (burst): `count` sends from one thread, then receive+complete of all of them. A phase that
has not finished after `cap` seconds stops there and reports the rate over what it did (the
depth column says so), which keeps the whole comparison under ten minutes on slow disks.
B (steady state): producers and consumers threads for `seconds` after 1 s of warm-up;
producers hold the backlog near `depth`. Batched B uses batches of depth / producers.
"""

import argparse
import json
import os
import random
import sqlite3
import string
import threading
import time

PEERS = {}


def peer(name):
    def deco(cls):
        PEERS[name] = cls
        cls.name = name
        return cls

    return deco


def text_body(n):
    rnd = random.Random(42)
    return "".join(rnd.choice(string.ascii_letters) for _ in range(n))


# ---- persist-queue ---------------------------------------------------------------------------


@peer("persist-queue")
class PersistQueue:
    durability = "SQLite WAL, synchronous=FULL (library default): fsync per commit"
    batched = False

    def __init__(self, args):
        import persistqueue

        self.q = persistqueue.SQLiteAckQueue(
            os.path.join(args.dir, "persist-queue"), multithreading=True, auto_resume=True
        )
        self.body = os.urandom(args.body)

    def client(self):
        return self  # one shared instance: the library is built for that (two connections)

    def send(self):
        self.q.put(self.body)

    def receive_complete(self):
        import persistqueue

        try:
            item = self.q.get(block=True, timeout=0.1, raw=True)
        except persistqueue.Empty:
            return 0
        self.q.ack(id=item["pqid"])
        return 1


# ---- litequeue ---------------------------------------------------------------------------------


@peer("litequeue")
class LiteQueuePeer:
    durability = "SQLite WAL, synchronous=NORMAL (library default): no fsync per commit"
    batched = False
    sync = None

    def __init__(self, args):
        self.path = os.path.join(args.dir, "litequeue.sqlite3")
        self.body = text_body(args.body)
        self.client()  # creates the table

    def client(self):
        from litequeue import LiteQueue

        q = LiteQueue(self.path, timeout=30)
        if self.sync:
            q.conn.execute(f"PRAGMA synchronous = {self.sync};")
        return LiteQueueClient(q, self.body)


@peer("litequeue-full")
class LiteQueueFull(LiteQueuePeer):
    durability = "SQLite WAL, synchronous=FULL (set after opening): fsync per commit"
    sync = "FULL"


class LiteQueueClient:
    def __init__(self, q, body):
        self.q, self.body = q, body

    def send(self):
        self.q.put(self.body)

    def receive_complete(self):
        deadline = time.monotonic() + 0.1
        while True:
            m = self.q.pop()  # no blocking receive in litequeue: poll
            if m is not None:
                self.q.done(m.message_id)
                return 1
            if time.monotonic() >= deadline:
                return 0
            time.sleep(0.001)


# ---- plain SQLite WAL queue, synchronous=FULL ---------------------------------------------------


@peer("sqlite-wal-full")
class SqliteFull:
    durability = "SQLite WAL, synchronous=FULL: fsync per commit"
    batched = True

    def __init__(self, args):
        self.path = os.path.join(args.dir, "plain.sqlite3")
        self.body = os.urandom(args.body)
        self.batch = args.batch
        c = self.connect()
        c.execute(
            "CREATE TABLE IF NOT EXISTS q (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " body BLOB NOT NULL, locked_until INTEGER NOT NULL DEFAULT 0)"
        )
        c.close()

    def connect(self):
        c = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=FULL")
        return c

    def client(self):
        return SqliteClient(self.connect(), self.body)


class SqliteClient:
    LOCK_MS = 30_000

    def __init__(self, c, body):
        self.c, self.body = c, body

    def send(self):
        self.c.execute("INSERT INTO q (body) VALUES (?)", (self.body,))

    def send_many(self, k):
        self.c.execute("BEGIN IMMEDIATE")
        self.c.executemany("INSERT INTO q (body) VALUES (?)", [(self.body,)] * k)
        self.c.execute("COMMIT")

    def _lock(self, k):
        now = int(time.time() * 1000)
        return self.c.execute(
            "UPDATE q SET locked_until = ? WHERE id IN"
            " (SELECT id FROM q WHERE locked_until < ? ORDER BY id LIMIT ?) RETURNING id, body",
            (now + self.LOCK_MS, now, k),
        ).fetchall()

    def _poll(self, k):
        deadline = time.monotonic() + 0.1
        while True:
            rows = self._lock(k)
            if rows or time.monotonic() >= deadline:
                return rows
            time.sleep(0.001)

    def receive_complete(self):
        rows = self._poll(1)  # commit 1: lock
        for (i, _) in rows:
            self.c.execute("DELETE FROM q WHERE id = ?", (i,))  # commit 2: complete
        return len(rows)

    def consume_one(self):
        """The peer of postbox's consume loop: one durable commit per consumed message, taking
        the head and deleting it in one statement (no lock, so no second commit)."""
        now = int(time.time() * 1000)
        row = self.c.execute(
            "DELETE FROM q WHERE id = (SELECT id FROM q WHERE locked_until < ? ORDER BY id LIMIT 1)"
            " RETURNING id, body",
            (now,),
        ).fetchone()
        return 0 if row is None else 1

    def receive_complete_many(self, k):
        rows = self._poll(k)
        if rows:
            ids = [r[0] for r in rows]
            self.c.execute(
                "DELETE FROM q WHERE id IN (%s)" % ",".join("?" * len(ids)), ids
            )
        return len(rows)


# ---- RabbitMQ quorum queue, publisher confirms, manual acks --------------------------------------


@peer("rabbitmq-quorum")
class Rabbit:
    durability = "quorum queue: publisher confirm after the Raft log fsync; acks not confirmed"
    batched = True

    def __init__(self, args):
        import pika

        self.params = pika.ConnectionParameters(
            host="127.0.0.1", port=args.amqp_port, heartbeat=0, blocked_connection_timeout=60
        )
        self.body = os.urandom(args.body)
        self.batch = args.batch
        conn = pika.BlockingConnection(self.params)
        ch = conn.channel()
        ch.queue_delete(queue="bench")
        ch.queue_declare(queue="bench", durable=True, arguments={"x-queue-type": "quorum"})
        conn.close()

    def client(self):
        return RabbitClient(self)


class RabbitClient:
    def __init__(self, peer_):
        import pika

        self.pika = pika
        self.conn = pika.BlockingConnection(peer_.params)
        self.ch = self.conn.channel()
        self.body = peer_.body
        self.batch = peer_.batch
        self.props = pika.BasicProperties(delivery_mode=2)
        self.mode = None
        self.consumer = None
        self.pending = []

    def _confirm_each(self):
        if self.mode is None:
            self.ch.confirm_delivery()  # basic_publish now waits for each confirm
            self.mode = "each"

    def _confirm_batched(self):
        if self.mode is None:
            # Confirms on the underlying channel with our own callback, so that publishing does
            # not wait and one wait covers a whole batch (acks come with multiple=True).
            self.acked, self.published, ready = 0, 0, []

            def on_ack(frame):
                m = frame.method
                if isinstance(m, self.pika.spec.Basic.Nack):
                    raise RuntimeError("publish nacked")
                self.acked = max(self.acked, m.delivery_tag)

            self.ch._impl.confirm_delivery(ack_nack_callback=on_ack, callback=lambda f: ready.append(f))
            while not ready:
                self.conn.process_data_events(time_limit=0.01)
            self.mode = "batched"

    def send(self):
        self._confirm_each()
        self.ch.basic_publish(exchange="", routing_key="bench", body=self.body, properties=self.props)

    def send_many(self, k):
        self._confirm_batched()
        for _ in range(k):
            self.ch.basic_publish(exchange="", routing_key="bench", body=self.body, properties=self.props)
        self.published += k
        while self.acked < self.published:
            self.conn.process_data_events(time_limit=0.05)

    def _consume(self, prefetch):
        if self.consumer is None:
            self.ch.basic_qos(prefetch_count=prefetch)
            self.consumer = self.ch.consume("bench", auto_ack=False, inactivity_timeout=0.1)
        return next(self.consumer)

    def receive_complete(self):
        method, _props, _body = self._consume(1)
        if method is None:
            return 0
        self.ch.basic_ack(method.delivery_tag)
        return 1

    def receive_complete_many(self, k):
        got, last = 0, None
        while got < k:
            method, _props, _body = self._consume(k)
            if method is None:
                break
            got, last = got + 1, method.delivery_tag
        if last is not None:
            self.ch.basic_ack(last, multiple=True)
        return got


# ---- Redis Streams, appendfsync always, consumer group -------------------------------------------


@peer("redis-streams")
class RedisStreams:
    durability = "AOF appendfsync always: fsync before each reply (shared by concurrent clients)"
    batched = True

    def __init__(self, args):
        import redis

        self.redis = redis
        self.port = args.redis_port
        self.body = os.urandom(args.body)
        r = self.redis.Redis(host="127.0.0.1", port=self.port)
        r.delete("bench")
        r.xgroup_create("bench", "g", id="0", mkstream=True)
        r.close()
        self.n = 0
        self.lock = threading.Lock()

    def client(self):
        with self.lock:
            self.n += 1
            name = f"c{self.n}"
        return RedisClient(self.redis.Redis(host="127.0.0.1", port=self.port), self.body, name)


class RedisClient:
    def __init__(self, r, body, name):
        self.r, self.body, self.name = r, body, name

    def send(self):
        self.r.xadd("bench", {"b": self.body})

    def send_many(self, k):
        p = self.r.pipeline(transaction=False)
        for _ in range(k):
            p.xadd("bench", {"b": self.body})
        p.execute()

    def _read(self, k):
        got = self.r.xreadgroup("g", self.name, {"bench": ">"}, count=k, block=100)
        return [i for _stream, entries in got for (i, _f) in entries]

    def receive_complete(self):
        ids = self._read(1)
        if ids:
            self.r.xack("bench", "g", *ids)
        return len(ids)

    def receive_complete_many(self, k):
        ids = self._read(k)
        if ids:
            self.r.xack("bench", "g", *ids)
        return len(ids)


# ---- workloads -----------------------------------------------------------------------------------


def emit(args, p, phase, msgs, secs, depth, **extra):
    line = {
        "system": p.name,
        "class": args.cls,
        "workload": args.workload,
        "phase": phase,
        "msgs": msgs,
        "secs": secs,
        "msgs_per_s": msgs / secs if secs > 0 else 0.0,
        "depth": depth,
        "durability": p.durability,
    }
    line.update(extra)
    print(json.dumps(line), flush=True)


def workload_a(args, p):
    c = p.client()
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
    emit(args, p, "send", sent, send_s, f"0→{sent}" + (f" (capped at {args.cap:g} s)" if capped else ""))
    t = time.monotonic()
    got = 0
    while got < sent and time.monotonic() - t < args.cap:
        n = c.receive_complete_many(args.batch) if batched else c.receive_complete()
        got += n
    recv_s = time.monotonic() - t
    emit(
        args, p, "receive+complete", got, recv_s,
        f"{sent}→{sent - got}" + (f" (capped at {args.cap:g} s)" if got < sent else ""),
    )
    emit(args, p, "total", sent + got, send_s + recv_s, f"0→{sent}→{sent - got}")
    if not batched and hasattr(c, "consume_one"):
        consume_loop(args, p, c, sent, got)


def consume_loop(args, p, c, sent, consumed):
    """Like postbox's consume loop: refill (untimed) to the `sent` messages the receive+complete
    phase started from, then consume them one commit each."""
    for _ in range(consumed):
        c.send()
    t = time.monotonic()
    got = 0
    while got < sent and time.monotonic() - t < args.cap:
        n = c.consume_one()
        if n == 0:
            break
        got += n
    secs = time.monotonic() - t
    emit(
        args, p, "consume loop", got, secs,
        f"{sent}→{sent - got}" + (f" (capped at {args.cap:g} s)" if got < sent else ""),
    )


def workload_b(args, p):
    batched = args.cls == "batched"
    batch = max(1, args.depth // args.producers) if batched else 1
    state = {"depth": 0, "done": 0}
    lock = threading.Lock()
    stop = threading.Event()
    measuring = threading.Event()
    errors = []

    def producer():
        try:
            c = p.client()
            while not stop.is_set():
                if state["depth"] >= args.depth:
                    time.sleep(0.0001)
                    continue
                # Counted before the send returns: a consumer may see it first.
                with lock:
                    state["depth"] += batch
                if batched:
                    c.send_many(batch)
                else:
                    c.send()
        except Exception as e:  # noqa: BLE001 - reported in the JSON line
            errors.append(repr(e))

    def consumer():
        try:
            c = p.client()
            while not stop.is_set():
                n = c.receive_complete_many(batch) if batched else c.receive_complete()
                with lock:
                    state["depth"] -= n
                    if measuring.is_set():
                        state["done"] += n
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
    extra = {"producers": args.producers, "consumers": args.consumers, "batch": batch}
    if errors:
        extra["errors"] = errors[:3]
    emit(args, p, "steady", done, secs, f"~{sum(samples) // max(1, len(samples))}", **extra)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", required=True, choices=sorted(PEERS))
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
    ap.add_argument("--redis-port", type=int, default=6390)
    ap.add_argument("--amqp-port", type=int, default=5682)
    args = ap.parse_args()
    p = PEERS[args.peer](args)
    if args.cls == "batched" and not p.batched:
        raise SystemExit(f"{args.peer} has no batched API")
    (workload_a if args.workload == "A" else workload_b)(args, p)


if __name__ == "__main__":
    main()
