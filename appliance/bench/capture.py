"""``appliance bench capture``: cost of handing one 1080p frame from a capture process to the inference
process, through the shared-memory ring versus through a ``multiprocessing.Queue``, in one run.

Both run producer and consumer in separate processes. The queue is pipelined (maxsize 2), which favours
it; the ring runs in lockstep (the producer waits until the consumer has leased each frame), which
counts the cross-process wake-up against it. "Decoded in place" is how capture works: the source reads
straight into the claimed slot, so the handoff itself moves no pixels. "Copy into slot" adds one full
copy, as for a source that cannot write into caller memory.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from appliance.capture.layout import RingGeometry
from appliance.capture.ring import RingReader, RingWriter
from appliance.capture.ringfile import create_ring, ring_path
from appliance.helptext import plain_help


def _frame(width: int, height: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _queue_producer(queue, width: int, height: int, count: int) -> None:
    # Rotate over 4 buffers: Queue pickles in a feeder thread after put() returns, so a buffer may be
    # stamped again only once its item was taken (maxsize 2 guarantees that for the one 4 puts back).
    frames = [_frame(width, height) for _ in range(4)]
    for i in range(count):
        frame = frames[i % 4]
        frame[0, 0, 0] = i % 256
        queue.put(frame)


def _ring_producer(path: str, width: int, height: int, count: int, copy: bool) -> None:
    frame = _frame(width, height)
    writer = RingWriter(path)
    slots = writer._slots
    for i in range(count):
        claim = writer.claim()
        while claim is None:
            time.sleep(0)
            claim = writer.claim()
        if copy:
            np.copyto(claim.array, frame)
        claim.array[0, 0, 0] = i % 256  # the "decoder" writing the frame in place
        writer.publish(claim, time.monotonic(), time.time())
        while not slots[claim.slot]["consumed"]:  # lockstep: wait until the consumer has it
            time.sleep(0)
    writer.close()


def bench_queue(ctx, width: int, height: int, count: int) -> float:
    queue = ctx.Queue(maxsize=2)
    proc = ctx.Process(target=_queue_producer, args=(queue, width, height, count + 1), daemon=True)
    proc.start()
    queue.get()  # warm: the producer is up and the pipe is flowing
    start = time.perf_counter()
    for i in range(1, count + 1):
        frame = queue.get()
        assert frame[0, 0, 0] == i % 256 and frame.shape == (height, width, 3)
    elapsed = time.perf_counter() - start
    proc.join()
    return elapsed / count


def bench_ring(ctx, root: Path, width: int, height: int, count: int, copy: bool) -> float:
    path = ring_path(root, f"bench-{'copy' if copy else 'inplace'}")
    with create_ring(path, RingGeometry(width, height, slots=4), "bench"), RingReader(path) as reader:
        proc = ctx.Process(target=_ring_producer, args=(str(path), width, height, count + 1, copy), daemon=True)
        proc.start()
        last = None
        start = 0.0
        for i in range(count + 1):
            lease = reader.acquire_latest(after_seq=last)
            while lease is None:
                time.sleep(0)
                lease = reader.acquire_latest(after_seq=last)
            with lease:
                assert lease.array[0, 0, 0] == i % 256 and lease.array.shape == (height, width, 3)
                last = lease.meta.seq
            if i == 0:
                start = time.perf_counter()
        elapsed = time.perf_counter() - start
        proc.join()
    return elapsed / count


def bench_calls(root: Path, width: int, height: int, count: int) -> tuple[float, float]:
    """CPU cost of the ring calls alone, one process: writer claim+publish, reader acquire+release."""
    path = ring_path(root, "bench-calls")
    with create_ring(path, RingGeometry(width, height, slots=4), "bench"):
        writer, reader = RingWriter(path), RingReader(path)
        start = time.perf_counter()
        for _ in range(count):
            claim = writer.claim()
            if claim is None:  # cannot happen: nothing holds a lease while the writer runs
                raise RuntimeError(f"every slot of {path} is leased")
            writer.publish(claim, 0.0, 0.0)
        write = (time.perf_counter() - start) / count
        start = time.perf_counter()
        for _ in range(count):
            lease = reader.acquire_latest()
            if lease is None:  # cannot happen: the writer published above
                raise RuntimeError(f"{path} has no frame to lease")
            lease.release()
        read = (time.perf_counter() - start) / count
        reader.close()
        writer.close()
    return write, read


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="appliance bench capture", description=plain_help(__doc__))
    parser.add_argument("--frames", type=int, default=300, help="frames per method (default 300)")
    parser.add_argument("--quick", action="store_true", help="60 frames per method")
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--shm-root", default="/dev/shm", help="where the benchmark rings go (default /dev/shm)")
    args = parser.parse_args(argv)
    count = 60 if args.quick else args.frames
    if count < 1:
        parser.error("--frames must be at least 1")
    ctx = multiprocessing.get_context("spawn")
    root = Path(tempfile.mkdtemp(prefix="appliance-bench-", dir=args.shm_root))
    try:
        queue = bench_queue(ctx, args.width, args.height, count)
        inplace = bench_ring(ctx, root, args.width, args.height, count, copy=False)
        copied = bench_ring(ctx, root, args.width, args.height, count, copy=True)
        write, read = bench_calls(root, args.width, args.height, 2000)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    mb = args.width * args.height * 3 / 1e6
    print(f"handoff of one {args.width}x{args.height}x3 frame ({mb:.1f} MB), {count} frames each, producer and "
          "consumer in separate processes")
    print(f"{'method':<52}{'per frame':>12}{'frames/s':>10}{'vs queue':>10}")
    rows = [
        ("multiprocessing.Queue (pickle + pipe, pipelined)", queue),
        ("shm ring, decoded in place (lease, lockstep)", inplace),
        ("shm ring, copy into slot + lease (lockstep)", copied),
    ]
    for name, cost in rows:
        print(f"{name:<52}{cost * 1e3:>9.3f} ms{1 / cost:>10.0f}{queue / cost:>9.1f}x")
    print(f"ring calls alone (one process): claim+publish {write * 1e6:.1f} us, acquire+release {read * 1e6:.1f} us")
    print(f"shm_copy_speedup_vs_queue={queue / copied:.1f}")
    print(f"shm_speedup_vs_queue={queue / inplace:.1f}")
    return 0
