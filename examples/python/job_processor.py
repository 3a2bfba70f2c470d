"""Job processor: a Processor handles jobs on worker threads, retrying failures and
dead-lettering what keeps failing.

    python examples/python/job_processor.py [STORE_PATH]

Sends 20 jobs; jobs 7 and 13 fail on their first delivery (a transient error: retried and then
completed), job 17 always fails (dead-lettered after max_deliveries), and job 19 is refused as
malformed (dead-lettered at once by the handler). Exits 0 when every job ended as expected.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import postbox

JOBS = 20
FLAKY = {7, 13}  # fail once, then succeed
BROKEN = 17  # always fails
MALFORMED = 19  # refused by the handler


def run(path: Path) -> None:
    done: list[int] = []
    lock = threading.Lock()

    def handle(msg: postbox.Message) -> None:
        n = int(msg.text.split()[1])
        if n == MALFORMED:
            # Retrying cannot help: dead-letter it now, with a reason.
            msg.dead_letter("malformed", f"job {n} has no input")
            return
        if n == BROKEN or (n in FLAKY and msg.delivery_count == 1):
            raise RuntimeError(f"job {n} failed on delivery {msg.delivery_count}")
        with lock:
            done.append(n)  # returning completes the message

    with postbox.Store(path) as store:
        jobs = store.queue("jobs", lock_duration=30, max_deliveries=3)
        jobs.send_batch([{"body": f"job {n}", "label": "work"} for n in range(JOBS)])
        print(f"sent {JOBS} jobs to {jobs!r}")

        with postbox.Processor(jobs, handle, workers=4, retry_delay=0.05) as processor:
            print(f"started {processor!r}")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                stats = jobs.stats()
                ended = len(done) + stats.dead_lettered
                if ended == JOBS and stats.active + stats.locked + stats.scheduled == 0:
                    break
                time.sleep(0.02)
            report = processor.shutdown(timeout=5)
        print(f"processor report: {report!r}")

        stats = jobs.stats()
        print(f"queue: {stats!r}")
        dead = {}
        for m in jobs.dead_letters.browse():
            dead[int(m.text.split()[1])] = m.dead_letter_reason
        for n, reason in sorted(dead.items()):
            print(f"dead letter: job {n}, reason {reason!r}")

        expected_done = set(range(JOBS)) - {BROKEN, MALFORMED}
        assert sorted(done) == sorted(expected_done), f"completed {sorted(done)}"
        assert set(dead) == {BROKEN, MALFORMED}, f"dead letters {dead}"
        assert dead[MALFORMED] == "malformed", dead
        assert stats.active == stats.locked == stats.scheduled == 0, stats
        retried = len(FLAKY)
        print(f"ok: {len(done)} jobs completed ({retried} after a retry), {len(dead)} dead-lettered")


def main() -> int:
    if len(sys.argv) > 1:
        run(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as d:
            run(Path(d) / "jobs.postbox")
    return 0


if __name__ == "__main__":
    sys.exit(main())
