"""Percentile-watermark throughput and memory: exact incremental, vectorised, sketch, naive.

Traces: ``theory.data.generators.generate_trace(n, seed=0)``. Source level: an element is
active from its event time until it arrives, so ``A(t)`` is the data in flight. Each
element makes two events. Per trace size, the median over ``--repeats`` runs (trace
generation excluded, one untimed warm-up run first) of:

- ``vectorised``: ``percentile_details`` on the whole trace, elements/s and events/s, at
  ``--p`` and at each of ``--vector-ps``; with ``--general`` also at ``--p`` on the
  same elements at stage level (activations out of event-time order: the general sweep);
- ``incremental``: ``PercentileWatermark``, updates (activate/complete calls) per second,
  with one ``current()`` per distinct processing time, from prebuilt Python lists;
- ``sketch``: ``SketchPercentileWatermark``, updates/s with an evaluation every
  ``--eval-every`` updates, for ``exact`` (default capacity: nothing is sketched here)
  and ``sketched`` (``exact_capacity=256``). An untimed run beside an exact mirror
  records the peak footprint, the largest stated and true rank errors ``/ n``, the
  evaluations whose true error exceeds the bound ``E`` and how often the estimate is
  exact; one more gives the peak of the sketch's Python allocations (tracemalloc);
- ``naive``: on a ``--naive`` element trace, ``np.quantile(A, 1 - p, method="lower")``
  recomputed from the active set at every step, against the incremental and vectorised
  forms on the same trace.

``--keep-freed-memory`` asks glibc to keep freed memory for reuse (numpy temporaries
over 32 MB are otherwise fresh memory from the kernel each time), which isolates the
computation; the default allocator is what users get. ``--record`` appends the figures
to ``bench/results/percentile.json``. Usage::

    python bench/percentile.py --sizes 1000000 10000000 --repeats 3
"""

from __future__ import annotations

import os
import statistics
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from bench_args import add_repeats, bench_parser
from peak_memory import keep_freed_memory  # bench/peak_memory.py (this folder)
from record import Recorder

from theory.data.generators import generate_trace
from theory.structures import OrderStatisticList
from theory.watermarks.percentile import PercentileWatermark
from theory.watermarks.percentile_sketch import SketchPercentileWatermark
from theory.watermarks.percentile_sweep import percentile_details

SKETCHES: dict[str, dict[str, Any]] = {
    "exact": {},
    "sketched": {"exact_capacity": 256},
}


def event_lists(e: np.ndarray, a: np.ndarray) -> tuple[list[int], list[int], list[int], list[bool]]:
    """Events in processing-time order (activations first at a time): times, event times,
    kinds (0 activation, 1 completion), and whether each is the last at its time."""
    n = e.size
    when = np.concatenate((e, a))
    kind = np.concatenate((np.zeros(n, np.int8), np.ones(n, np.int8)))
    order = np.lexsort((kind, when))
    ts = when[order]
    last = np.ones(ts.size, dtype=bool)
    last[:-1] = ts[1:] != ts[:-1]
    values = np.concatenate((e, e))[order]
    return ts.tolist(), values.tolist(), kind[order].tolist(), last.tolist()


def stage_processing(n: int) -> np.ndarray:
    """Seeded processing times of a stage (µs): log-normal, median 1 s, sigma 1."""
    rng = np.random.default_rng(1)
    return rng.lognormal(np.log(1e6), 1.0, n).astype(np.int64)


def run_vectorised(e: np.ndarray, act: np.ndarray, done: np.ndarray, p: float) -> float:
    """Seconds for one ``percentile_details`` over the whole trace."""
    t0 = time.perf_counter()
    percentile_details(e, act, done, p)
    return time.perf_counter() - t0


def print_vectorised(n: int, dt: float, label: str) -> None:
    print(
        f"vectorised   {dt:8.2f} s  {n / dt:>12,.0f} elements/s"
        f"  {2 * n / dt:>12,.0f} events/s  ({label})"
    )


def run_incremental(p: float, values: list[int], kinds: list[int], lasts: list[bool]) -> float:
    w = PercentileWatermark(p)
    act, comp, cur = w.activate, w.complete, w.current
    t0 = time.perf_counter()
    for x, k, last in zip(values, kinds, lasts, strict=True):
        if k:
            comp(x)
        else:
            act(x)
        if last:
            cur()
    return time.perf_counter() - t0


def run_sketch(
    p: float,
    params: dict[str, Any],
    ev: tuple[list[int], list[int], list[int], list[bool]],
    every: int,
    probe: Callable[[SketchPercentileWatermark, int], None] | None = None,
) -> float:
    ts, values, kinds, _ = ev
    sk = SketchPercentileWatermark(p, **params)
    act, comp, computed = sk.activate, sk.complete, sk.computed
    t0 = time.perf_counter()
    for i, (t, x, k) in enumerate(zip(ts, values, kinds, strict=True)):
        if k:
            comp(x, x, t)  # activated at its event time
        else:
            act(x, t)
        if i % every == every - 1:
            computed()
            if probe is not None:
                probe(sk, t)
    return time.perf_counter() - t0


def sketch_quality(p: float, params: dict[str, Any], ev: Any, every: int) -> dict[str, float]:
    """Untimed run beside an exact mirror (:class:`OrderStatisticList`): peak footprint
    (``memory_bytes``), the largest stated bound ``E / n``, the largest true rank error
    ``/ n`` (how far the answer's rank range in the exact active set is from the target
    rank), evaluations where the true error exceeds ``E`` (must be 0 at the sketches'
    99 % confidence), and the exact-match rate; then the tracemalloc peak of a run of the
    sketch alone."""
    ts, values, kinds, _ = ev
    stats = {"mem": 0.0, "bound": 0.0, "err": 0.0, "over": 0.0, "match": 0.0, "evals": 0.0}
    q = 1.0 - p
    sk = SketchPercentileWatermark(p, **params)
    exact = OrderStatisticList()
    for i, (t, x, k) in enumerate(zip(ts, values, kinds, strict=True)):
        if k:
            sk.complete(x, x, t)  # activated at its event time
            exact.remove(x)
        else:
            sk.activate(x, t)
            exact.add(x)
        if i % every == every - 1 and len(exact):
            n = len(exact)
            v = sk.computed()
            assert v is not None
            target = int((n - 1) * q)
            lo, hi = exact.count_lt(v), exact.count_le(v) - 1  # ranks v occupies (or
            err = max(lo - target, target - hi, 0)  # would: lo = hi + 1 if v is absent)
            stats["mem"] = max(stats["mem"], sk.memory_bytes())
            stats["bound"] = max(stats["bound"], sk.error_bound / n)
            stats["err"] = max(stats["err"], err / n)
            stats["over"] += err > sk.error_bound
            stats["match"] += v == exact.kth(target)
            stats["evals"] += 1
    tracemalloc.start()  # Python allocations of the sketch alone, in a run of its own
    run_sketch(p, params, ev, every)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    stats["py_peak"] = float(peak)
    stats["match"] /= max(stats["evals"], 1)
    return stats


def naive(p: float, values: list[int], kinds: list[int], lasts: list[bool]) -> float:
    """np.quantile over the active set, rebuilt from a dict of counts at every step."""
    active: dict[int, int] = {}
    q = 1.0 - p
    t0 = time.perf_counter()
    for x, k, last in zip(values, kinds, lasts, strict=True):
        if k:
            left = active[x] - 1
            if left:
                active[x] = left
            else:
                del active[x]
        else:
            active[x] = active.get(x, 0) + 1
        if last and active:
            arr = np.repeat(np.fromiter(active.keys(), np.int64), list(active.values()))
            np.quantile(arr, q, method="lower")
    return time.perf_counter() - t0


def median_time(fn: Callable[[], float], repeats: int) -> float:
    """The median of ``repeats`` timed runs after one untimed warm-up run."""
    fn()
    return statistics.median(fn() for _ in range(repeats))


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    add_repeats(parser, 3)
    parser.add_argument("--p", type=float, default=0.9)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--naive", type=int, default=20_000)
    parser.add_argument("--skip-quality", action="store_true", help="no sketch memory run")
    parser.add_argument(
        "--vector-ps",
        type=float,
        nargs="*",
        default=[0.5, 0.99, 1.0],
        help="more p for the vectorised curve alone",
    )
    parser.add_argument("--only-vectorised", action="store_true")
    parser.add_argument(
        "--general",
        action="store_true",
        help="also the vectorised curve of a stage (the general sweep)",
    )
    parser.add_argument(
        "--keep-freed-memory",
        action="store_true",
        help="glibc keeps freed memory (isolates first-touch costs)",
    )
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, float] = {}
    p = args.p
    if args.keep_freed_memory:
        keep_freed_memory()
    print(
        f"p={p}  repeats={args.repeats}  load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs (medians; contention lowers every rate)  allocator: "
        f"{'glibc keeping freed memory' if args.keep_freed_memory else 'default'}"
    )

    for n in args.sizes:
        tr = generate_trace(n, seed=0)
        e, a = tr.event_time, tr.arrival_time
        print(f"\n== {n:,} elements ({2 * n:,} events)")

        for vp in [p, *(x for x in args.vector_ps if x != p)]:
            dt = median_time(partial(run_vectorised, e, e, a, vp), args.repeats)
            print_vectorised(n, dt, f"p={vp}")
            figures[f"{n} vectorised p={vp} events/s"] = round(2 * n / dt)
        if args.general:
            dt = median_time(
                partial(run_vectorised, e, a, a + stage_processing(n), p), args.repeats
            )
            print_vectorised(n, dt, f"p={p}, stage level: general path")
            figures[f"{n} vectorised p={p} stage level events/s"] = round(2 * n / dt)
        if args.only_vectorised:
            continue
        ev = event_lists(e, a)
        dt = median_time(partial(run_incremental, p, ev[1], ev[2], ev[3]), args.repeats)
        print(f"incremental  {dt:8.2f} s  {2 * n / dt:>12,.0f} updates/s")
        figures[f"{n} incremental updates/s"] = round(2 * n / dt)

        for name, params in SKETCHES.items():
            dt = median_time(partial(run_sketch, p, params, ev, args.eval_every), args.repeats)
            line = f"sketch {name:9s}{dt:6.2f} s  {2 * n / dt:>12,.0f} updates/s"
            figures[f"{n} sketch {name} updates/s"] = round(2 * n / dt)
            if not args.skip_quality:
                s = sketch_quality(p, params, ev, args.eval_every)
                line += (
                    f"  peak {s['mem'] / 1e6:6.2f} MB (python {s['py_peak'] / 1e6:6.2f} MB)"
                    f"  max E/n {s['bound']:.4f}  max true error/n {s['err']:.4f}"
                    f"  over E {s['over']:.0f} of {s['evals']:.0f}"
                    f"  exact-equal {s['match']:.1%}"
                )
                figures[f"{n} sketch {name} peak MB"] = round(s["mem"] / 1e6, 3)
                figures[f"{n} sketch {name} evaluations over E"] = s["over"]
            print(line)
        del ev

    if args.only_vectorised:
        recorder.save(figures)
        return
    m = args.naive
    tr = generate_trace(m, seed=0)
    e, a = tr.event_time, tr.arrival_time
    _, values, kinds, lasts = event_lists(e, a)
    steps = sum(lasts)
    t_naive = median_time(lambda: naive(p, values, kinds, lasts), args.repeats)
    t_inc = median_time(lambda: run_incremental(p, values, kinds, lasts), args.repeats)

    t_vec = median_time(partial(run_vectorised, e, e, a, p), args.repeats)
    print(f"\n== naive recompute on {m:,} elements ({steps:,} steps)")
    print(f"naive        {t_naive:8.2f} s  {steps / t_naive:>12,.0f} steps/s")
    print(f"incremental  {t_inc:8.2f} s  {t_naive / t_inc:>8.0f}x faster than naive")
    print(f"vectorised   {t_vec:8.2f} s  {t_naive / t_vec:>8.0f}x faster than naive")
    figures[f"naive {m} steps/s"] = round(steps / t_naive)
    figures["incremental/naive speed-up"] = round(t_naive / t_inc, 1)
    figures["vectorised/naive speed-up"] = round(t_naive / t_vec, 1)
    recorder.save(figures)


if __name__ == "__main__":
    main()
