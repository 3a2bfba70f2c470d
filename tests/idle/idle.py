"""A child process for the idle wake-up measurement (tests/idle/measure.py): opens a store, sets
up one idle scenario, prints IDLE and waits for nothing until killed.

Usage: python idle.py <store> <scenario> [multi]

  open            the store stays open, nothing waits
  receive         the main thread blocks in Queue.receive() on an empty queue
  receive-thread  a second thread blocks in Queue.receive(); the main thread joins it
  aio             an asyncio loop awaits postbox.aio.AsyncQueue.receive()
  processor       a postbox.Processor with the default workers on an empty queue

With "multi" the store is opened with multi_process=True.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading

import postbox
import postbox.aio


def idle() -> None:
    print("IDLE", flush=True)


def main() -> int:
    if len(sys.argv) not in (3, 4) or sys.argv[3:] not in ([], ["multi"]):
        print(__doc__, file=sys.stderr)
        return 64
    path, scenario = sys.argv[1], sys.argv[2]
    store = postbox.Store(path, multi_process=len(sys.argv) == 4)
    queue = store.queue("idle")
    if scenario == "open":
        idle()
        while True:
            signal.pause()
    elif scenario == "receive":
        idle()
        queue.receive()
    elif scenario == "receive-thread":
        worker = threading.Thread(target=queue.receive, daemon=True)
        worker.start()
        idle()
        worker.join()
    elif scenario == "aio":

        async def wait() -> None:
            aq = postbox.aio.AsyncQueue(queue)
            pending = asyncio.ensure_future(aq.receive())
            await asyncio.sleep(0)
            idle()
            await pending

        asyncio.run(wait())
    elif scenario == "processor":
        processor = postbox.Processor(queue, lambda message: None)
        idle()
        while True:
            signal.pause()
    else:
        print(f"unknown scenario {scenario}", file=sys.stderr)
        return 64
    print("a message arrived on a queue nobody sends to", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
