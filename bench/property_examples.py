"""A property test's cost and reach on assert_panes' default runner (BundleBasedDirectRunner).

The transform under test: clicks per user, ``FixedWindows(1 min)``, early firings 10 s of
processing time after the first element, late firings per element, accumulating, summed;
2 min of allowed lateness meant. For each script strategy it reports the median wall
time of one example on the right pipeline (``--examples`` drawn examples), then runs the
property against a planted pipeline with 5 s of lateness (derandomized, up to
``--max-examples``) and reports whether it fails, after how many examples and seconds,
and how many examples and seconds shrinking took. Strategies: ``scripts_for`` (the
default, scaled to the windowing), ``scripts("1s")`` and ``scripts("20s")``. With
``--cache-rounds N`` it first times the ``scripts_for`` examples with and without
:func:`beam_pipelines.construction_cache.cached_construction`, in ``N`` interleaved rounds, and
reports both medians. Usage::

    python bench/property_examples.py [--examples 20] [--max-examples 100] [--cache-rounds 3]
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Any

import apache_beam as beam
from bench_args import bench_parser
from hypothesis import HealthCheck, given, settings
from record import Recorder

from beam_pipelines.convert import to_beam
from beam_pipelines.testing import assert_panes, panes
from beam_pipelines.testing.strategies import PROPERTY_SETTINGS, scripts, scripts_for
from theory import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    FixedWindows,
    WindowingStrategy,
)
from theory.windowing.strategy import AccumulationMode


def clicks(lateness: str) -> WindowingStrategy:
    trigger = AfterWatermark(early=AfterProcessingTime("10s"), late=AfterCount(1))
    return WindowingStrategy(FixedWindows("1m"), trigger, AccumulationMode.ACCUMULATING, lateness)


SPEC, PLANTED = clicks("2m"), clicks("5s")


class ClicksPerUser(beam.PTransform):
    def __init__(self, strategy: WindowingStrategy) -> None:
        super().__init__()
        self.strategy = strategy

    def expand(self, pcoll: Any) -> Any:
        return pcoll | to_beam(self.strategy) | beam.CombinePerKey(sum)


STRATEGIES = {
    "scripts_for": lambda: scripts_for(SPEC),
    "scripts(1s)": lambda: scripts("1s"),
    "scripts(20s)": lambda: scripts("20s"),
}


def example_times(strategy: Any, n: int) -> list[float]:
    """Wall time (s) of each of ``n`` derandomized examples on the right pipeline."""
    times: list[float] = []

    @settings(
        PROPERTY_SETTINGS,
        derandomize=True,
        database=None,
        max_examples=n,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def right(script: Any) -> None:
        t0 = time.perf_counter()
        assert_panes(ClicksPerUser(SPEC), script, SPEC, combine=sum)
        times.append(time.perf_counter() - t0)

    right()
    return times


def cache_comparison(n: int, rounds: int) -> tuple[float, float]:
    """Median example time (s) of the ``scripts_for`` examples with the construction cache
    and without it, in ``rounds`` interleaved rounds of ``n`` examples each."""
    cached = panes.cached_construction
    with_cache: list[float] = []
    without: list[float] = []
    for _ in range(rounds):
        with_cache += example_times(STRATEGIES["scripts_for"](), n)
        panes.cached_construction = contextlib.nullcontext  # type: ignore[assignment]
        try:
            without += example_times(STRATEGIES["scripts_for"](), n)
        finally:
            panes.cached_construction = cached
    return statistics.median(with_cache), statistics.median(without)


def search(strategy: Any, max_examples: int) -> dict[str, Any]:
    """Run the property against the planted pipeline: found, examples and seconds to the
    first failure, examples and seconds after it (shrinking)."""
    calls: list[tuple[float, bool]] = []

    @settings(
        PROPERTY_SETTINGS,
        derandomize=True,
        database=None,
        max_examples=max_examples,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(strategy)
    def planted(script: Any) -> None:
        try:
            assert_panes(ClicksPerUser(PLANTED), script, SPEC, combine=sum)
        except AssertionError:
            calls.append((time.perf_counter(), False))
            raise
        calls.append((time.perf_counter(), True))

    t0 = time.perf_counter()
    found = False
    try:
        planted()
    except AssertionError:
        found = True
    end = time.perf_counter()
    first = next((i for i, (_, ok) in enumerate(calls) if not ok), None)
    if first is None:
        return {"found": False, "examples": len(calls), "seconds": end - t0}
    at = calls[first][0]
    return {
        "found": found,
        "examples": first + 1,
        "seconds": at - t0,
        "shrink examples": len(calls) - first - 1,
        "shrink seconds": end - at,
        "total seconds": end - t0,
    }


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--examples", type=int, default=20, help="examples timed per strategy")
    parser.add_argument(
        "--max-examples", type=int, default=100, help="examples the planted search may run"
    )
    parser.add_argument(
        "--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES)
    )
    parser.add_argument(
        "--cache-rounds", type=int, default=0, help="rounds timing the construction cache"
    )
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, float | str] = {}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    example_times(STRATEGIES["scripts_for"](), 2)  # warm Beam's imports and caches
    if args.cache_rounds:
        cached, uncached = cache_comparison(args.examples, args.cache_rounds)
        print(
            f"  scripts_for example median {cached:.3f} s with the construction cache, "
            f"{uncached:.3f} s without ({cached / uncached:.2f}x)",
            flush=True,
        )
        figures["example median s (construction cache)"] = round(cached, 4)
        figures["example median s (no cache)"] = round(uncached, 4)
    for name in args.strategies:
        times = example_times(STRATEGIES[name](), args.examples)
        median = statistics.median(times)
        print(
            f"{name:>13} example median {median:.3f} s, max {max(times):.3f} s "
            f"({len(times)} examples)",
            flush=True,
        )
        figures[f"{name} example median s"] = round(median, 4)
        found = search(STRATEGIES[name](), args.max_examples)
        if found["found"]:
            print(
                f"{name:>13} planted 5 s lateness found after {found['examples']} examples "
                f"in {found['seconds']:.1f} s; shrinking {found['shrink examples']} examples "
                f"in {found['shrink seconds']:.1f} s; total {found['total seconds']:.1f} s",
                flush=True,
            )
            figures[f"{name} found total s"] = round(found["total seconds"], 2)
            figures[f"{name} found after examples"] = found["examples"]
            figures[f"{name} shrink examples"] = found["shrink examples"]
        else:
            print(
                f"{name:>13} planted 5 s lateness NOT found in {found['examples']} examples "
                f"({found['seconds']:.1f} s)",
                flush=True,
            )
            figures[f"{name} found total s"] = "not found"
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    recorder.save(figures)


if __name__ == "__main__":
    main()
