"""Batch of tiles: an image is split into N tile pieces of one job; worker threads render the
tiles; the job is done, exactly, once every piece has ended, and its continuation ("stitch the
image") is sent in the commit that ends the last one.

    python examples/python/batch_of_tiles.py [STORE_PATH]

Exits 0 when the job is done with every tile completed and the stitch message arrived.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

import postbox

TILES = 16
WORKERS = 4


def worker(tiles: postbox.Queue, rendered: list[int], lock: threading.Lock) -> None:
    """Renders tiles until none is left; completing a tile ends its piece of the job."""
    while True:
        try:
            msg = tiles.receive(timeout=0.2)
        except postbox.Empty:
            return
        with msg:  # completed when the block ends normally, abandoned if it raises
            tile = int(msg.properties["tile"])
            with lock:
                rendered.append(tile)


def run(path: Path) -> None:
    with postbox.Store(path) as store:
        tiles = store.queue("tiles", lock_duration=30)
        stitch = store.queue("stitch")
        job = store.create_job(
            continuation=(stitch, {"body": b"image 7", "label": "stitch"}),
        )
        ids = job.send_batch(
            tiles,
            [
                {"body": f"render tile {t} of image 7", "properties": {"tile": str(t)}}
                for t in range(TILES)
            ],
        )
        progress = job.seal()  # no more pieces
        print(f"{job!r}: {len(ids)} tiles sent and sealed, {progress!r}")

        rendered: list[int] = []
        lock = threading.Lock()
        threads = [
            threading.Thread(target=worker, args=(tiles, rendered, lock)) for _ in range(WORKERS)
        ]
        for t in threads:
            t.start()
        progress = job.wait(timeout=20)
        for t in threads:
            t.join()
        print(f"job finished: {progress!r}")

        assert progress.done, progress
        assert progress.completed == TILES and progress.dead_lettered == 0, progress
        assert sorted(rendered) == list(range(TILES)), rendered
        assert all(p.state == "completed" for p in job.pieces())
        with stitch.receive(timeout=5) as msg:
            print(f"continuation arrived: {msg!r}")
            assert msg.text == "image 7" and msg.label == "stitch"
        print(f"ok: {TILES} tiles rendered by {WORKERS} workers, the image stitched once")


def main() -> int:
    if len(sys.argv) > 1:
        run(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as d:
            run(Path(d) / "tiles.postbox")
    return 0


if __name__ == "__main__":
    sys.exit(main())
