"""Valve throughput: the heap valve against the linear-scan valve, one run, several fan-ins.

Each fan-in and workload gets one seeded update sequence, fed to both valves through their
bound methods (input validation included). Both workloads are 99% watermarks and 1% status
toggles, which alternate: ``IDLE`` for a random channel, then ``ACTIVE`` for that same
channel at the next status update, so at most one channel is idle at a time.

- ``random``: each watermark goes to a uniformly random channel, at that channel's last
  watermark plus a uniform step in [1, 1000] µs; 1 in 50 is instead a stale, lower value
  (ignored by the valve);
- ``round-robin``: channels take turns, as periodic emitters do; in round ``r`` a channel
  sends ``1000 r`` plus uniform jitter in [0, 1000) µs. The channel updated is usually
  the minimum, so the heap valve sifts it down most of the heap's depth: its worst case.

Prints, per fan-in and valve, the median over ``--repeats`` runs of updates per second, and
the heap/linear ratio of the medians. The linear valve gets fewer updates at large fan-in
(each costs O(n)); rates are per update, so they compare. Usage::

    python bench/valve.py --repeats 5
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
from bench_args import add_repeats, add_seed, bench_parser
from record import Recorder

from theory.flink.valve import LinearScanValve, StatusWatermarkValve, StreamStatus

Op = tuple[int, int, object]  # (0 = watermark / 1 = status, channel, value)


def make_ops(fan_in: int, count: int, seed: int, workload: str = "random") -> list[Op]:
    """The update sequence described in the module docstring."""
    rng = np.random.default_rng(seed)
    if workload == "random":
        channels = rng.integers(0, fan_in, count).tolist()
    elif workload == "round-robin":
        channels = [i % fan_in for i in range(count)]
    else:
        raise ValueError(f"unknown workload {workload!r}")
    steps = rng.integers(1, 1001, count).tolist()
    kinds = (rng.random(count) < 0.01).tolist()
    stale = (rng.random(count) < 0.02).tolist()
    wm = [0] * fan_in
    ops: list[Op] = []
    idle_channel = -1
    for i, (ch, step, is_status, is_stale) in enumerate(
        zip(channels, steps, kinds, stale, strict=True)
    ):
        if is_status:
            if idle_channel < 0:
                idle_channel = ch
                ops.append((1, ch, StreamStatus.IDLE))
            else:
                ops.append((1, idle_channel, StreamStatus.ACTIVE))
                idle_channel = -1
        elif workload == "round-robin":
            wm[ch] = max(wm[ch] + 1, 1000 * (i // fan_in) + step - 1)
            ops.append((0, ch, wm[ch]))
        elif is_stale:
            ops.append((0, ch, wm[ch] - step))
        else:
            wm[ch] += step
            ops.append((0, ch, wm[ch]))
    return ops


def run(factory: Callable[[int], object], fan_in: int, ops: list[Op]) -> float:
    """Seconds to feed ``ops`` to a fresh valve (construction excluded)."""
    valve = factory(fan_in)
    fns = (valve.input_watermark, valve.input_status)  # type: ignore[attr-defined]
    bound = [(fns[k], c, v) for k, c, v in ops]
    t0 = time.perf_counter()
    for fn, c, v in bound:
        fn(c, v)
    return time.perf_counter() - t0


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--fan-in", type=int, nargs="+", default=[2, 64, 1024, 16384])
    add_repeats(parser, 5)
    parser.add_argument("--updates", type=int, default=200_000, help="heap valve updates")
    parser.add_argument(
        "--linear-work",
        type=int,
        default=20_000_000,
        help="linear valve budget: updates x fan-in (at least 2,000 updates)",
    )
    add_seed(parser, 0)
    parser.add_argument("--workload", choices=["random", "round-robin", "both"], default="both")
    args = parser.parse_args()
    recorder = Recorder.from_args(__file__, args)
    figures: dict[str, float] = {}
    workloads = ["random", "round-robin"] if args.workload == "both" else [args.workload]
    print(
        f"{'workload':>11} {'fan-in':>7} {'valve':>7} {'updates':>9} {'median s':>9} "
        f"{'updates/s':>12} {'ratio':>8}"
    )
    for workload in workloads:
        for fan_in in args.fan_in:
            ops = make_ops(fan_in, args.updates, args.seed, workload)
            n_lin = min(len(ops), max(2_000, args.linear_work // fan_in))
            rates = {}
            for name, factory, sub in (
                ("heap", StatusWatermarkValve, ops),
                ("linear", LinearScanValve, ops[:n_lin]),
            ):
                times = [run(factory, fan_in, sub) for _ in range(args.repeats)]
                med = statistics.median(times)
                rates[name] = len(sub) / med
                ratio = f"{rates['heap'] / rates['linear']:>7.1f}x" if name == "linear" else ""
                print(
                    f"{workload:>11} {fan_in:>7} {name:>7} {len(sub):>9,} {med:>9.4f} "
                    f"{rates[name]:>12,.0f} {ratio:>8}"
                )
                figures[f"{workload} fan-in {fan_in} {name} updates/s"] = round(rates[name])
                if name == "linear":
                    figures[f"{workload} fan-in {fan_in} heap/linear"] = round(
                        rates["heap"] / rates["linear"], 3
                    )
    recorder.save(figures)


if __name__ == "__main__":
    main()
