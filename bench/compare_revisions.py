"""Compare one bench command on two revisions (git worktrees), interleaved, by medians.

Runs ``COMMAND`` once per tree per round, in each tree's directory with ``PYTHONPATH`` set
to that tree (so each revision imports its own code; Spark's workers inherit it). The
order alternates (A B, then B A, ...) so that a drift in the machine's load falls on both
sides. Each ``--metric NAME=REGEX`` takes the first capture group of the first line of
the command's output that matches (a number in seconds or any unit; thousands commas
are dropped); without ``--metric`` the figure is the command's wall time (s). A leading
``python`` in the command is replaced by this interpreter.

``--cpu-clock`` (for ``python SCRIPT ...`` commands) makes the script's own timer,
``time.perf_counter``, read the process's CPU time (``time.process_time``): on a shared
machine a wall clock measures the queue for the cores as much as the code. Do not use
it where the work happens in other processes (Spark's JVM and workers).

Prints, per metric, the median of each tree, the ratio B/A of the medians, the spread of
the per-round ratios and the load averages (1 min) seen before the runs; ``--record``
appends them to ``bench/results/compare_revisions.json``. Exits 1 if a command fails or
a metric is not found. Usage::

    python bench/compare_revisions.py /work/wt-base /work/wt-new --rounds 5 \\
        --metric 'random 64=random\\s+64\\s+heap\\s+\\S+\\s+([\\d.]+)' \\
        -- python bench/valve.py --repeats 1 --fan-in 64 --workload random
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from record import Recorder, add_record, commit


def parse_metric(text: str) -> tuple[str, re.Pattern[str]]:
    """``NAME=REGEX`` -> (name, compiled regex with one capture group)."""
    name, sep, pattern = text.partition("=")
    if not sep or not name or not pattern:
        raise argparse.ArgumentTypeError(f"--metric {text!r}: expected NAME=REGEX")
    regex = re.compile(pattern, re.MULTILINE)
    if regex.groups < 1:
        raise argparse.ArgumentTypeError(f"--metric {name!r}: the regex needs a capture group")
    return name, regex


def extract(output: str, metrics: list[tuple[str, re.Pattern[str]]]) -> dict[str, float]:
    """The figure of every metric in ``output``; ValueError naming a metric not found."""
    found = {}
    for name, regex in metrics:
        match = regex.search(output)
        if match is None:
            raise ValueError(f"metric {name!r}: /{regex.pattern}/ matches no line of the output")
        found[name] = float(match.group(1).replace(",", ""))
    return found


#: Runs ``argv[1]`` as ``__main__`` with ``time.perf_counter`` reading CPU time.
_CPU_CLOCK = (
    "import os, runpy, sys, time; time.perf_counter = time.process_time; "
    "sys.argv = sys.argv[1:]; sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0]))); "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def cpu_clock_command(command: list[str]) -> list[str]:
    """``python SCRIPT ARGS`` -> the same under :data:`_CPU_CLOCK`; ValueError otherwise."""
    if len(command) < 2 or command[0] != sys.executable or command[1].startswith("-"):
        raise ValueError(f"--cpu-clock needs 'python SCRIPT ...', got {' '.join(command)!r}")
    return [sys.executable, "-c", _CPU_CLOCK, *command[1:]]


def run_once(
    tree: Path, command: list[str], metrics: list[tuple[str, re.Pattern[str]]]
) -> dict[str, float]:
    """Run ``command`` in ``tree`` with that tree on PYTHONPATH; its figures."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"{' '.join(command)} failed in {tree} (exit {proc.returncode})")
    if not metrics:
        return {"wall s": wall}
    try:
        return extract(proc.stdout, metrics)
    except ValueError as err:
        sys.stderr.write(proc.stdout)
        raise SystemExit(f"in {tree}: {err}") from None


def summarise(
    runs: dict[str, list[dict[str, float]]], a: str, b: str
) -> list[tuple[str, float, float, float, float, float]]:
    """Per metric: (name, median A, median B, B/A of the medians, min and max round ratio)."""
    rows = []
    for name in runs[a][0]:
        xs = [r[name] for r in runs[a]]
        ys = [r[name] for r in runs[b]]
        ratios = [y / x for x, y in zip(xs, ys, strict=True) if x]
        med_a, med_b = statistics.median(xs), statistics.median(ys)
        ratio = med_b / med_a if med_a else float("nan")
        rows.append((name, med_a, med_b, ratio, min(ratios, default=0.0), max(ratios, default=0.0)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], usage="%(prog)s A B [options] -- COMMAND ..."
    )
    parser.add_argument("tree_a", type=Path, help="worktree of the base revision (A)")
    parser.add_argument("tree_b", type=Path, help="worktree of the new revision (B)")
    parser.add_argument("--rounds", type=int, default=5, help="runs per tree (median taken)")
    parser.add_argument("--metric", type=parse_metric, action="append", default=[])
    parser.add_argument(
        "--cpu-clock", action="store_true", help="the script's perf_counter reads CPU time"
    )
    add_record(parser)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    recorder = Recorder.from_args(__file__, args)
    command = argv[cut + 1 :]
    if not command:
        parser.error("no command given (after --)")
    if command[0] == "python":
        command = [sys.executable, *command[1:]]
    if args.cpu_clock:
        try:
            command = cpu_clock_command(command)
        except ValueError as err:
            parser.error(str(err))
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    trees = {"A": args.tree_a.resolve(), "B": args.tree_b.resolve()}
    for label, tree in trees.items():
        if not tree.is_dir():
            parser.error(f"tree {label} {tree} is not a directory")
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    loads = []
    for round_ in range(args.rounds):
        order = ("A", "B") if round_ % 2 == 0 else ("B", "A")
        for label in order:
            loads.append(os.getloadavg()[0])
            runs[label].append(run_once(trees[label], command, args.metric))
        last = {k: runs[k][-1] for k in order}
        print(
            f"round {round_ + 1}/{args.rounds} ({' '.join(order)}), load {loads[-1]:.1f}: "
            + "; ".join(f"{m} A {last['A'][m]:.4g} B {last['B'][m]:.4g}" for m in last["A"]),
            flush=True,
        )
    clock = "CPU time (--cpu-clock)" if args.cpu_clock else "wall time"
    print(f"\nA = {trees['A']}\nB = {trees['B']}\ncommand: {' '.join(command)}\nclock: {clock}")
    print(
        f"medians of {args.rounds} interleaved runs each; load (1 min) "
        f"{min(loads):.1f}-{max(loads):.1f}, median {statistics.median(loads):.1f}"
    )
    print(f"{'metric':>24} {'A':>10} {'B':>10} {'B/A':>6}  round ratios")
    figures: dict[str, float | str | None] = {
        "command": " ".join(command),
        "clock": clock,
        "rounds": args.rounds,
        "A commit": commit(trees["A"])["sha"],
        "B commit": commit(trees["B"])["sha"],
    }
    for name, med_a, med_b, ratio, lo, hi in summarise(runs, "A", "B"):
        print(f"{name:>24} {med_a:>10.4g} {med_b:>10.4g} {ratio:>6.2f}  {lo:.2f}-{hi:.2f}")
        figures[f"{name} A"] = med_a
        figures[f"{name} B"] = med_b
        figures[f"{name} B/A"] = round(ratio, 4)
        figures[f"{name} round ratios"] = f"{lo:.2f}-{hi:.2f}"
    recorder.save(figures)


if __name__ == "__main__":
    main()
