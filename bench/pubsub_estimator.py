"""Pub/Sub base/tracking estimator: throughput, memory, and comparison with other rules.

Prints (medians over ``--repeats`` runs or ``--seeds`` seeds):

1. ``on_tracked`` throughput, scalar (one Python call per message) and vectorised
   (``on_tracked_batch``, 10k messages per call), on a dense stream;
2. memory while feeding ``--memory-messages`` messages in 100k batches with an
   ``estimate`` after each (base 2 s behind): held buckets and traced bytes, which must
   stay flat;
3. on the simulated Pub/Sub (1% duplicates, 0.1% of base reads lost and redelivered after
   the 10 s ack deadline, 5 s delivery disorder, event time = publish time - U[0, 5 s]):
   the median distance ``true - watermark`` (s) and the late fraction of the tracking
   estimator (capped, and the book's uncapped rule), Beam's PubsubUnboundedSource rule,
   bounded out-of-orderness (bound = band = 10 s) and the 99th-percentile watermark of
   the unprocessed backlog (an oracle), on dense, sparse, bursty and slow-base streams. Usage::

    python bench/pubsub_estimator.py --seeds 5 --duration 600
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import tracemalloc

import numpy as np
from bench_args import add_repeats, bench_parser
from record import Recorder

from theory.dataflow.pubsub import TrackingEstimator
from theory.dataflow.pubsub_simulation import T0, scenario, simulate_pubsub
from theory.time import SECOND

ESTIMATORS = ("tracking", "tracking-book", "beam", "bounded", "percentile:0.99")


def dense(n: int, seed: int = 0, rate: int = 20_000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pt = T0 + np.sort(rng.integers(0, n * SECOND // rate, n))
    return pt, pt - rng.integers(0, 5 * SECOND, n)


def throughput(n: int, repeats: int, figures: dict[str, float]) -> None:
    pt, et = dense(n)
    ptl, etl = pt.tolist(), et.tolist()
    scalar, batch = [], []
    for _ in range(repeats):
        est = TrackingEstimator()
        f = est.on_tracked
        t0 = time.perf_counter()
        for a, b in zip(ptl, etl, strict=True):
            f(a, b)
        scalar.append(n / (time.perf_counter() - t0))
        est = TrackingEstimator()
        t0 = time.perf_counter()
        for i in range(0, n, 10_000):
            est.on_tracked_batch(pt[i : i + 10_000], et[i : i + 10_000])
        batch.append(n / (time.perf_counter() - t0))
    print(f"on_tracked throughput over {n:,} messages (median of {repeats}, best):")
    for name, rates in (("scalar on_tracked", scalar), ("on_tracked_batch (10k)", batch)):
        print(f"  {name:<24}{statistics.median(rates):>14,.0f} msg/s  best {max(rates):>14,.0f}")
        figures[f"{name} msg/s"] = round(statistics.median(rates))


def memory(total: int, figures: dict[str, float], chunk: int = 100_000) -> None:
    est = TrackingEstimator()
    rng = np.random.default_rng(1)
    per_chunk = chunk * SECOND // 20_000  # 20k messages/s
    marks = {total // 10, total // 4, total // 2, total}
    tracemalloc.start()
    base_line = tracemalloc.get_traced_memory()[0]
    print(f"memory while tracking {total:,} messages (20k msg/s, base 2 s behind):")
    print(f"  {'messages':>12} {'buckets':>8} {'traced KiB':>11} {'peak KiB':>9}")
    fed = 0
    while fed < total:
        start = T0 + (fed // chunk) * per_chunk
        pt = start + np.sort(rng.integers(0, per_chunk, chunk))
        et = pt - rng.integers(0, 5 * SECOND, chunk)
        est.on_tracked_batch(pt, et)
        newest = int(pt[-1])
        del pt, et
        est.estimate(newest, newest - 2 * SECOND, False)
        fed += chunk
        if any(fed - chunk < m <= fed for m in marks):  # a mark inside this chunk
            cur, peak = tracemalloc.get_traced_memory()
            print(
                f"  {fed:>12,} {est.bucket_count:>8} {(cur - base_line) / 1024:>11.1f} "
                f"{(peak - base_line) / 1024:>9.1f}"
            )
            figures[f"memory at {fed} messages: buckets"] = est.bucket_count
            figures[f"memory at {fed} messages: traced KiB"] = round((cur - base_line) / 1024, 1)
    tracemalloc.stop()


def comparison(seeds: int, duration: int, figures: dict[str, float]) -> None:
    print(
        f"simulated Pub/Sub, {duration // SECOND} s per run, medians over {seeds} seeds: "
        "distance true - watermark (s, median over ticks) / late %"
    )
    header = "".join(f"{name:>24}" for name in ESTIMATORS)
    print(f"  {'stream':<10}{'msgs':>7}{'buckets':>8}{header}")
    for kind in ("dense", "sparse", "bursty", "slow-base"):
        rows: dict[str, list[tuple[float, float]]] = {name: [] for name in ESTIMATORS}
        sizes, buckets = [], []
        for seed in range(seeds):
            pt, et, cfg = scenario(
                kind,
                seed=seed,
                duration=duration,
                duplicate_probability=0.01,
                base_loss_probability=0.001,
            )
            r = simulate_pubsub(pt, et, cfg)
            book = r.record.series(**{**cfg.estimator_params(), "cap_at_idle_lag": False})
            r = dataclasses.replace(r, watermarks={**r.watermarks, "tracking-book": book.watermark})
            sizes.append(pt.size)
            buckets.append(r.counters["max_buckets"])
            for name in ESTIMATORS:
                lag = r.lag_seconds(name)
                rows[name].append(
                    (float(np.median(lag)) if lag.size else float("nan"), r.late_fraction(name))
                )
        cells = "".join(
            f"{statistics.median(d for d, _ in v):>14.2f} /"
            f"{100 * statistics.median(f for _, f in v):>7.3f}%"
            for v in rows.values()
        )
        size, held = statistics.median(sizes), statistics.median(buckets)
        print(f"  {kind:<10}{size:>7.0f}{held:>8.0f}{cells}")
        for name, v in rows.items():
            figures[f"{kind} {name} distance s"] = round(statistics.median(d for d, _ in v), 3)
            figures[f"{kind} {name} late %"] = round(100 * statistics.median(f for _, f in v), 4)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--memory-messages", type=int, default=10_000_000)
    add_repeats(parser, 3)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=600, help="seconds per simulation")
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["throughput", "memory", "compare"]
    )
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, float] = {}
    if "throughput" not in args.skip:
        throughput(args.messages, args.repeats, figures)
    if "memory" not in args.skip:
        memory(args.memory_messages, figures)
    if "compare" not in args.skip:
        comparison(args.seeds, args.duration * SECOND, figures)
    recorder.save(figures)


if __name__ == "__main__":
    main()
