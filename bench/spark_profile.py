"""The whole-trace spark profile's speed, beside the beam profile on the same trace.

One seeded trace (``theory.generate_trace``: the default spec, keys, delays and
stragglers) of each size; on it, the median wall time over ``--repeats`` runs of

- **spark**: :func:`theory.spark.trace.spark_trace_profile` (``withWatermark(delay)``,
  ``--window`` tumbling counts, a ``ProcessingTime(--trigger)`` trigger), and
- **beam**: the trade-off experiment's beam profile on that trace (``theory.simulate`` of
  a ``bounded:<delay>`` source watermark into one fixed-window grouping stage,
  ``AfterWatermark``), as ``theory.experiments.tradeoff`` runs it,

and events per second (by wall time, and by the process's CPU time, steadier on a loaded
machine), with the spark/beam ratio of the rates. Both run in this
process on one core (numpy's threads pinned to 1). The beam profile can run on a prefix
of the trace (``--beam-events``) when it is too slow for the full size; the ratio is then
of rates. Usage::

    python bench/spark_profile.py --events 10000000 --repeats 3
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from functools import partial  # noqa: E402

from record import Recorder, add_record  # noqa: E402

from theory import FixedWindows, Trace, generate_trace, parse_duration, simulate  # noqa: E402
from theory.experiments.tradeoff import Strategy  # noqa: E402
from theory.spark.trace import SparkTraceResult, spark_trace_profile  # noqa: E402


def median_time(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Medians of the wall time and of the process's CPU time over ``repeats`` runs (on a
    loaded machine the CPU time is the steadier figure)."""
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def run_spark(trace: Trace, window: int, delay: int, trigger: int) -> SparkTraceResult:
    return spark_trace_profile(
        trace.event_time,
        trace.arrival_time,
        trace.key,
        window=FixedWindows(window),
        delay=delay,
        trigger_interval=trigger,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument(
        "--beam-events",
        type=int,
        default=None,
        help="run the beam profile on this prefix (default: the whole trace)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", default="2m")
    parser.add_argument("--delay", default="10s")
    parser.add_argument("--trigger", default="1s")
    add_record(parser)
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, float] = {}
    window = parse_duration(args.window)
    delay = parse_duration(args.delay)
    trigger = parse_duration(args.trigger)
    print(f"load: {os.getloadavg()[0]:.1f} (1-min average)")
    print(
        f"{'events':>12} {'profile':>8} {'median s':>9} {'events/s':>14} {'cpu s':>7} "
        f"{'events/cpu-s':>14}  detail"
    )
    for n in args.events:
        trace = generate_trace(n, seed=0)
        result = run_spark(trace, window, delay, trigger)
        spark_s, spark_cpu = median_time(
            partial(run_spark, trace, window, delay, trigger), args.repeats
        )
        detail = (
            f"{result.batch_start.size:,} batches, {int(result.emitted.sum()):,} "
            f"windows emitted, {result.dropped_count:,} rows dropped"
        )
        print(
            f"{n:>12,} {'spark':>8} {spark_s:>9.2f} {n / spark_s:>14,.0f} {spark_cpu:>7.2f} "
            f"{n / spark_cpu:>14,.0f}  {detail}"
        )
        m = min(n, args.beam_events or n)
        beam_trace = trace.take(range(m)) if m < n else trace
        pipeline = Strategy("bounded", f"bounded:{delay}us").pipeline(window)
        beam_s, beam_cpu = median_time(
            partial(simulate, pipeline, {"in": beam_trace}, seed=0), args.repeats
        )
        print(
            f"{m:>12,} {'beam':>8} {beam_s:>9.2f} {m / beam_s:>14,.0f} {beam_cpu:>7.2f} "
            f"{m / beam_cpu:>14,.0f}  spark/beam rate ratio {(n / spark_s) / (m / beam_s):.1f}x "
            f"(cpu {(n / spark_cpu) / (m / beam_cpu):.1f}x)"
        )
        figures[f"{n} spark events/s"] = round(n / spark_s)
        figures[f"{n} spark events/cpu-s"] = round(n / spark_cpu)
        figures[f"{m} beam events/s"] = round(m / beam_s)
        figures[f"{n} spark/beam rate"] = round((n / spark_s) / (m / beam_s), 2)
        figures[f"{n} spark/beam cpu rate"] = round((n / spark_cpu) / (m / beam_cpu), 2)
    recorder.save(figures)


if __name__ == "__main__":
    main()
