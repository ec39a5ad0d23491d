"""Reproducer: FnApiRunner's ``result.metrics()`` raises RecursionError once a stage has
run more than about a thousand bundles (plain Apache Beam only; for an upstream report).

A splittable DoFn claims one position per bundle and checkpoints (``defer_remainder``),
as a streaming read does; FnApiRunner runs each residual as a new bundle of the same
stage. After each bundle ``fn_runner.py`` (``FnApiRunner._run_stage``) replaces the
stage's monitoring infos with ``consolidate(itertools.chain(this_bundle, previous))``:
``consolidate`` (``metrics/monitoring_infos.py``) is a generator, so the infos become one
generator nested per bundle, evaluated only when ``result.metrics()`` is queried. Python's
recursion limit (1,000 frames by default) is then exceeded. Usage::

    python tests/evidence/beam_metrics_recursion.py --bundles 900 1200 5100

It prints, per bundle count, whether the query worked; for a RecursionError, the
traceback's depth and its most frequent frames (file:line), and the lines of
``fn_runner.py`` that build the chain.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import traceback
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.runners.portability.fn_api_runner import FnApiRunner, fn_runner
from apache_beam.transforms.core import RestrictionProvider


class Positions(RestrictionProvider):
    """``n`` positions, ``OffsetRange(0, n)``."""

    def initial_restriction(self, n: int) -> OffsetRange:
        return OffsetRange(0, n)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, n: int, restriction: OffsetRange) -> int:
        return int(restriction.size())


_RESTRICTION = beam.DoFn.RestrictionParam(Positions())


class OnePerBundle(beam.DoFn):
    """Claims one position per bundle, counts it (``probe/checkpoints``), checkpoints."""

    def process(self, n: int, tracker: Any = _RESTRICTION) -> Iterator[int]:
        pos = tracker.current_restriction().start
        if tracker.try_claim(pos):
            Metrics.counter("probe", "checkpoints").inc()
            yield pos
            tracker.defer_remainder()


def run(bundles: int) -> Any:
    """The finished result of ``bundles`` bundles of one stage on FnApiRunner."""
    pipeline = beam.Pipeline(runner=FnApiRunner())
    _ = pipeline | beam.Create([bundles]) | beam.ParDo(OnePerBundle())
    result = pipeline.run()
    result.wait_until_finish()
    return result


def chain_lines() -> list[int]:
    """The lines of fn_runner.py that wrap a stage's infos in ``consolidate(chain(...))``."""
    with open(fn_runner.__file__, encoding="utf-8") as f:
        lines = f.readlines()
    return [
        i + 1
        for i, line in enumerate(lines[:-1])
        if re.search(r"consolidate_monitoring_infos\($", line.rstrip())
        and "itertools.chain(" in lines[i + 1]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundles", type=int, nargs="+", default=[900, 1200, 5100])
    args = parser.parse_args(argv)
    print(
        f"apache_beam {beam.__version__}, Python {sys.version.split()[0]}, "
        f"recursion limit {sys.getrecursionlimit()}"
    )
    print(f"chain built at {fn_runner.__file__}:{chain_lines()}")
    for n in args.bundles:
        result = run(n)
        try:
            counters = result.metrics().query()["counters"]
        except RecursionError as err:
            frames = traceback.extract_tb(err.__traceback__)
            where = collections.Counter(
                f"{f.filename.split('apache_beam/')[-1]}:{f.lineno} ({f.name})" for f in frames
            )
            print(f"{n:>6} bundles: RecursionError, traceback depth {len(frames)}")
            for frame, count in where.most_common(3):
                print(f"         {count:>5} x {frame}")
        else:
            got = sum(c.committed for c in counters if c.key.metric.name == "checkpoints")
            print(f"{n:>6} bundles: metrics() ok, probe/checkpoints = {got}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
