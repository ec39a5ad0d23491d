"""The grouping engine against Beam's BundleBasedDirectRunner, on the same scripts.

Seeded scripts of N elements and M watermark advances (10 keys, event times around the
watermark, a few percent late and some droppable; whole milliseconds), under two strategies:

- ``default``: FixedWindows(1 s), DefaultTrigger, 5 s allowed lateness, end-of-window
  output: what most pipelines run; the engine's vectorised path.
- ``early-late``: FixedWindows(1 s), AfterWatermark(early=AfterCount(5),
  late=AfterCount(1)), accumulating, earliest output: the count path
  (:mod:`theory.windowing.count_path`; the incremental engine runs Beam's trigger
  machinery).
- ``sessions``: Sessions(100 ms), DefaultTrigger, 5 s allowed lateness, end-of-window
  output, over 100 keys with no late data (a session with late data would go to the
  incremental engine: a "mixed" run).
- ``session-counts`` (only when named): the sessions scripts under
  AfterWatermark(early=AfterCount(5), late=AfterCount(1)), accumulating
  (:mod:`theory.windowing.session_counts`; sessions whose parts arrive apart and merge
  later go to the engine: a "mixed" run).

For 1k/100 and 2k/200 it times ``run_script`` and Beam (and checks that panes, their order
per window, stall flags and output watermarks are identical, as
``beam_pipelines.differential`` compares them); for the ``--large`` scripts (100k/10k and
1M/100k) only the engine, on the path ``run_script`` takes and on the incremental one
(``fast=False``, CPU ratio). The vectorised paths give their panes as a lazy
``PaneSequence`` (the ``Pane`` tuples are built on first access), so those rows also time
the run with every tuple built (``built cpu el/s``). Prints medians and the ratios. Usage::

    python bench/engine_vs_beam.py [--repeats 5] [--beam-repeats 3] [--strategies default]
"""

from __future__ import annotations

import os

import numpy as np
from bench_args import add_repeats, bench_parser
from record import Recorder
from timing import median_time  # bench/timing.py (this script's folder)

from beam_pipelines.differential import Case, differences, observe_beam
from theory.windowing import triggers as tt
from theory.windowing.runner import run_script
from theory.windowing.script import ElementEvent, Script, WatermarkEvent
from theory.windowing.strategy import AccumulationMode, TimestampCombiner, WindowingStrategy
from theory.windowing.windows import FixedWindows, Sessions

MS = 1000
SEC = 1_000_000

STRATEGIES = {
    "default": WindowingStrategy(FixedWindows(SEC), allowed_lateness=5 * SEC),
    "early-late": WindowingStrategy(
        FixedWindows(SEC),
        tt.AfterWatermark(early=tt.AfterCount(5), late=tt.AfterCount(1)),
        AccumulationMode.ACCUMULATING,
        5 * SEC,
        TimestampCombiner.OUTPUT_AT_EARLIEST,
    ),
    "sessions": WindowingStrategy(Sessions(100 * MS), allowed_lateness=5 * SEC),
    "session-counts": WindowingStrategy(
        Sessions(100 * MS),
        tt.AfterWatermark(early=tt.AfterCount(5), late=tt.AfterCount(1)),
        AccumulationMode.ACCUMULATING,
        5 * SEC,
    ),
}

#: Per strategy: (keys, fraction of late elements) of its scripts.
SCRIPTS = {
    "default": (10, 0.03),
    "early-late": (10, 0.03),
    "sessions": (100, 0.0),
    "session-counts": (100, 0.0),
}


def make_script(
    elements: int, advances: int, seed: int = 0, keys: int = 10, late_fraction: float = 0.03
) -> Script:
    """``advances`` watermark steps of 10 ms, each after a batch of elements over ``keys``
    keys, ``late_fraction`` of them late."""
    rng = np.random.default_rng(seed)
    per = np.diff(np.linspace(0, elements, advances + 1).round().astype(int))
    step = 10 * MS
    events: list[ElementEvent | WatermarkEvent] = []
    value = 0
    wm = 0
    for n in per.tolist():
        ahead = rng.integers(0, 200, n) * MS  # up to 200 ms ahead of the watermark
        late = rng.random(n) < late_fraction
        behind = rng.integers(1, 8_000, n) * MS  # up to 8 s behind: some droppable
        ts = np.where(late, wm - behind, wm + ahead)
        key = rng.integers(0, keys, n)
        events.append(
            ElementEvent(
                [(f"k{k}", value + i, int(t)) for i, (k, t) in enumerate(zip(key, ts, strict=True))]
            )
        )
        value += n
        wm += step
        events.append(WatermarkEvent(wm))
    return Script(events)


def main() -> None:
    parser = bench_parser(__doc__)
    add_repeats(parser, 5, "engine runs per script")
    parser.add_argument("--beam-repeats", type=int, default=3, help="Beam runs per script")
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=["default", "early-late", "sessions"],
        choices=STRATEGIES,
        help="(session-counts only when named)",
    )
    parser.add_argument(
        "--large",
        nargs="*",
        default=["100000:10000", "1000000:100000"],
        help="elements:advances of the engine-only scripts",
    )
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, float | str] = {}
    large = [tuple(map(int, x.split(":"))) for x in args.large]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"medians; load average {load:.1f} on {os.cpu_count()} cores")
    print(
        f"{'strategy':>10} {'script':>12} {'engine s':>9} {'engine el/s':>12} {'cpu el/s':>12} "
        f"{'beam s':>8} {'ratio':>8}  panes"
    )
    for name in args.strategies:
        strategy = STRATEGIES[name]
        keys, late_fraction = SCRIPTS[name]
        for elements, advances in ((1_000, 100), (2_000, 200), *large):
            script = make_script(elements, advances, keys=keys, late_fraction=late_fraction)
            ours_s, ours_cpu, ours = median_time(
                lambda s=script, st=strategy: run_script(s, st), args.repeats
            )
            panes = ours.panes  # type: ignore[attr-defined]
            path = ours.path  # type: ignore[attr-defined]
            label = f"{elements // 1000}k/{advances}"
            if elements > 2_000:
                _, built_cpu, _ = median_time(
                    lambda s=script, st=strategy: list(run_script(s, st).panes), args.repeats
                )
                _, slow_cpu, _ = median_time(
                    lambda s=script, st=strategy: run_script(s, st, fast=False), 1
                )
                print(
                    f"{name:>10} {label:>12} {ours_s:>9.4f} {elements / ours_s:>12,.0f} "
                    f"{elements / ours_cpu:>12,.0f} {'-':>8} {'-':>8}  {len(panes)} {path}, "
                    f"{slow_cpu / ours_cpu:.1f}x the incremental path's CPU el/s; "
                    f"panes built: {elements / built_cpu:,.0f} cpu el/s, "
                    f"{slow_cpu / built_cpu:.1f}x",
                    flush=True,
                )
                figures[f"{name} {label} engine cpu el/s"] = round(elements / ours_cpu)
                figures[f"{name} {label} incremental/engine cpu"] = round(slow_cpu / ours_cpu, 2)
                figures[f"{name} {label} panes built cpu el/s"] = round(elements / built_cpu)
                continue
            beam_s, _, beam = median_time(
                lambda s=script, st=strategy: observe_beam(s, st), args.beam_repeats
            )
            problems = differences(Case(script, strategy, name), beam, ours)  # type: ignore[arg-type]
            same = not problems
            print(
                f"{name:>10} {label:>12} {ours_s:>9.4f} {elements / ours_s:>12,.0f} "
                f"{elements / ours_cpu:>12,.0f} {beam_s:>8.2f} {beam_s / ours_s:>7,.0f}x  "
                f"{len(panes)} {path} {'identical' if same else 'DIFFERENT'}",
                flush=True,
            )
            figures[f"{name} {label} engine el/s"] = round(elements / ours_s)
            figures[f"{name} {label} beam/engine"] = round(beam_s / ours_s, 1)
            figures[f"{name} {label} path"] = f"{path} {'identical' if same else 'DIFFERENT'}"
            if not same:
                raise SystemExit(f"{name} {label}: the engine differs from Beam:\n" + problems[0])
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    recorder.save(figures)


if __name__ == "__main__":
    main()
