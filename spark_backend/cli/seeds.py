"""``--seeds N`` of ``demo`` and ``simulate``: the seeded work run once per seed of
:func:`theory.experiments.uncertainty.sweep_seeds`, a progress line per seed, and each
metric's mean and 95 % t interval (:func:`theory.experiments.uncertainty.over_seeds`).

The sweep runs on the local engine unless ``--engine spark`` is given: its cost is N
runs, and the local engine needs no JVM. The base seed's run is reused where it ran on
the sweep's engine.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping, Sequence

from spark_backend.cli.progress import Progress
from theory.experiments.uncertainty import IntervalTable, over_seeds, sweep_seeds

LOG = logging.getLogger("watermarks")

__all__ = ["check_seeds", "run_seeds", "sweep_engine"]

Table = Mapping[str, Sequence[object]]


def check_seeds(n: int) -> None:
    """``--seeds`` is at least 1 (1: the base seed alone, no sweep)."""
    if n < 1:
        raise ValueError(f"--seeds must be >= 1, got {n}")


def sweep_engine(args: argparse.Namespace) -> str:
    """The sweep's engine: ``spark`` when ``--engine spark`` was given (the demo's
    default Spark is not asked for: its parser notes ``engine_given``), else ``local``."""
    given = args.command == "simulate" or getattr(args, "engine_given", False)
    return "spark" if given and args.engine == "spark" else "local"


def run_seeds(
    run: Callable[[int], Table], n: int, base_seed: int, by: str, what: str
) -> IntervalTable:
    """``run(seed)`` for each of the ``n`` seeds from ``base_seed``, a progress line per
    seed naming it, then the table of means and intervals (rows by ``by``)."""
    seeds = sweep_seeds(base_seed, n)
    LOG.info("%s over %d seeds: %s", what, n, ", ".join(map(str, seeds)))
    bar = Progress(n)
    return over_seeds(
        run, n, base_seed=base_seed, by=by,
        on_seed=lambda i, seed: bar.step(f"seed {i + 1}/{n} ({seed}): {what}"),
    )
