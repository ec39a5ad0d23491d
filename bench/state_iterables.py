"""Benchmark: one hot key's GroupByKey read as Beam's state-backed iterable on PySparkRunner.

``n`` values of ``--value-bytes`` bytes (default 100), all under one key, generated in
the pipeline (a ``Create`` of shard numbers, then a ``FlatMap``), grouped with
``PySparkRunner(state_iterable_bytes=...)`` and every stage on Spark; the DoFn after the
GroupByKey iterates the group once and emits its count and an order-independent digest
(the sum of each value's CRC-32), which must equal a plain-Python oracle's. Prints the
seconds, values/s, and the peak resident memory (VmHWM, from ``/proc/<pid>/status``,
sampled every 0.5 s) of each Spark Python worker, of the driver and of the Spark JVM;
fails if a Python worker's passes ``--max-worker-gib``. Load averages are printed.

    .venv/bin/python bench/state_iterables.py --values 1e6
    .venv/bin/python bench/state_iterables.py --values 2e7 --spark-conf \
spark.python.worker.memory=256m
"""

from __future__ import annotations

import os
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to
from bench_args import bench_parser, counts

from spark_backend.runner import PySparkRunner

SHARDS = 64
GIB = 1 << 30


def value(i: int, size: int) -> bytes:
    """Value ``i``: its number, padded to ``size`` bytes."""
    return f"{i:012d}".encode().ljust(size, b"v")


def shard(kv: tuple[int, int], n: int, size: int) -> Any:
    index, _ = kv
    for i in range(index, n, SHARDS):
        yield "hot", value(i, size)


def digest(kv: tuple[str, Any]) -> tuple[str, int, int]:
    key, values = kv
    count = total = 0
    for v in values:
        count += 1
        total += zlib.crc32(v)
    return key, count, total


def oracle(n: int, size: int) -> tuple[str, int, int]:
    return "hot", n, sum(zlib.crc32(value(i, size)) for i in range(n))


def _hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class WorkerPeaks:
    """VmHWM (bytes) of every Spark Python worker under this process, sampled; the
    Spark JVM's (whose command line names pyspark too) apart, in ``jvm``."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self.jvm = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.sample()

    def sample(self) -> None:
        for pid in _descendants(os.getpid()):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if not (b"pyspark" in cmd or b"worker_daemon" in cmd):
                continue
            if os.path.basename(cmd.split(b"\0", 1)[0]) == b"java":
                self.jvm = max(self.jvm, _hwm(pid))
            else:
                self.peaks[pid] = max(self.peaks.get(pid, 0), _hwm(pid))

    def __enter__(self) -> WorkerPeaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def main() -> None:
    parser = bench_parser(__doc__ or "")
    parser.add_argument("--values", type=counts, default=[1_000_000], help="values of the key")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--threshold", type=int, default=1 << 20, help="state_iterable_bytes")
    parser.add_argument("--max-worker-gib", type=float, default=1.0)
    parser.add_argument(
        "--spark-conf", action="append", default=[], help="KEY=VALUE for the session"
    )
    args = parser.parse_args()
    from spark_backend.session.session import get_session

    get_session(conf=args.spark_conf)
    print(f"load averages {os.getloadavg()}")
    for n in args.values:
        expected = oracle(n, args.value_bytes)
        runner = PySparkRunner(state_iterable_bytes=args.threshold, driver_stages=False)
        p = beam.Pipeline(runner=runner)
        out = (
            p
            | beam.Create([(i, 0) for i in range(SHARDS)])
            | beam.FlatMap(shard, n, args.value_bytes)
            | beam.GroupByKey()
            | beam.Map(digest)
        )
        assert_that(out, equal_to([expected]))
        with WorkerPeaks() as peaks:
            start = time.perf_counter()
            p.run().wait_until_finish()
            seconds = time.perf_counter() - start
        worst = max(peaks.peaks.values(), default=0)
        print(
            f"n={n:,} x {args.value_bytes} B: {seconds:.1f} s, {n / seconds:,.0f} values/s; "
            f"output equals the oracle's; worker VmHWM max {worst / GIB:.2f} GiB over "
            f"{len(peaks.peaks)} workers; driver VmHWM {_hwm(os.getpid()) / GIB:.2f} GiB; "
            f"JVM VmHWM {peaks.jvm / GIB:.2f} GiB"
        )
        each = ", ".join(f"{v / GIB:.2f}" for v in sorted(peaks.peaks.values(), reverse=True))
        print(f"  each worker's VmHWM (GiB): {each}")
        if worst > args.max_worker_gib * GIB:
            raise SystemExit(f"a worker's VmHWM {worst / GIB:.2f} GiB > {args.max_worker_gib}")
    print(f"load averages {os.getloadavg()}")


if __name__ == "__main__":
    main()
