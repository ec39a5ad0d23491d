"""A grouping stage run as key partitions (on Spark, or here), exactly as one run.

Keys are independent in a grouping stage except through its output watermark: an
element older than the input watermark holds only if it is not behind the output
watermark, and a pane fired by data is EARLY or LATE by it. The output watermark is the
minimum of the input and of *every* key's holds. So each partition runs with an
external hold (:func:`theory.windowing.runner.run_columns`' ``external``): the minimum,
after each event, of the other partitions' own holds. Those come from the previous
round; a round whose outcome gives back the external holds it ran with is the stage's
run (the stage is causal, so that run is unique), usually the second. The driver then
reduces: holds by minimum, panes concatenated in event order, counts summed. All times
are µs.

:func:`run_partitioned` takes how to run a round's partitions (``map_parts``): a list
comprehension here (:func:`local_parts`); ``spark_backend.simulate.simulation`` runs the
rounds itself, each partition's elements kept on the executors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from theory.columns import check_count
from theory.time import MAX_TIMESTAMP
from theory.windowing.fast_path import ScriptColumns, key_codes, take_elements
from theory.windowing.pane_columns import PaneColumns
from theory.windowing.runner import run_columns
from theory.windowing.script import ScriptResult
from theory.windowing.strategy import WindowingStrategy

__all__ = [
    "PartResult",
    "local_parts",
    "run_part",
    "run_partitioned",
    "split_by_key",
]


class PartResult(NamedTuple):
    """What a partition's run sends back: its panes, their events, its own state hold
    after each event (µs), drops, late elements, pending processing-time timers, path
    and refusal (the watermark series are the driver's)."""

    pane_columns: PaneColumns
    pane_event: np.ndarray
    state_hold: np.ndarray
    dropped: dict[str, int]
    late_elements: int
    pending_processing_timers: int
    path: str
    refusal: str | None


def run_part(
    columns: ScriptColumns,
    strategy: WindowingStrategy,
    fast: bool,
    external: np.ndarray | None,
) -> PartResult:
    """One partition's run under the other partitions' ``external`` hold (None: none)."""
    r = run_columns(columns, strategy, fast=fast, build=False, external=external)
    panes = r.pane_columns if r.pane_columns is not None else PaneColumns.from_panes(r.panes)
    assert r.state_hold is not None  # (every path records it)
    return PartResult(
        panes,
        r.pane_event,
        r.state_hold,
        dict(r.dropped),
        r.late_elements,
        r.pending_processing_timers,
        r.path,
        r.refusal,
    )


#: Runs a round: each partition's columns with its external hold -> its result.
MapParts = Callable[[Sequence[np.ndarray | None]], list[PartResult]]


def local_parts(
    parts: Sequence[ScriptColumns], strategy: WindowingStrategy, fast: bool
) -> MapParts:
    """A round's partitions run one after the other in this process."""

    def run(external: Sequence[np.ndarray | None]) -> list[PartResult]:
        return [run_part(c, strategy, fast, e) for c, e in zip(parts, external, strict=True)]

    return run


def split_by_key(columns: ScriptColumns, n_parts: int) -> list[ScriptColumns]:
    """The script's elements split into at most ``n_parts`` partitions by key (keys
    numbered by first arrival, dealt round robin); empty partitions are left out. Every
    partition keeps all the events (the watermark and processing time are shared)."""
    check_count(n_parts, "partitions", minimum=1)
    coded = key_codes(columns.key)
    if coded is None:
        raise TypeError("partitioned grouping needs hashable keys")
    code, _ = coded
    part = code % n_parts
    out = []
    for p in range(n_parts):
        idx = np.flatnonzero(part == p)
        if idx.size or (p == 0 and not code.size):
            out.append(take_elements(columns, idx))
    return out


def _others_min(holds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """For each partition, the minimum of the other partitions' holds, per event."""
    n = len(holds)
    stack = np.stack(holds)
    before = np.minimum.accumulate(stack, axis=0)
    after = np.minimum.accumulate(stack[::-1], axis=0)[::-1]
    full = np.full(stack.shape[1], MAX_TIMESTAMP, np.int64)
    return [
        np.minimum(before[p - 1] if p else full, after[p + 1] if p + 1 < n else full)
        for p in range(n)
    ]


def run_partitioned(
    columns: ScriptColumns,
    map_parts: MapParts,
    n_parts: int,
    *,
    max_rounds: int = 64,
) -> ScriptResult:
    """The stage's result from its ``n_parts`` key partitions (``map_parts`` runs a
    round: see the module docstring), identical to one run of ``columns``. Raises
    ``RuntimeError`` if the rounds do not settle within ``max_rounds`` (each round
    settles at least one more event, so a script of fewer events always does)."""
    check_count(max_rounds, "max_rounds", minimum=1)
    external: list[np.ndarray | None] = [None] * n_parts
    for _ in range(max_rounds):
        results = map_parts(external)
        if n_parts == 1:
            return _reduce(columns, results)
        again = _others_min([r.state_hold for r in results])
        if all(
            np.array_equal(a, MAX_TIMESTAMP if e is None else e)
            for a, e in zip(again, external, strict=True)
        ):
            return _reduce(columns, results)
        external = list(again)
    raise RuntimeError(f"the key partitions' holds did not settle in {max_rounds} rounds")


def _reduce(columns: ScriptColumns, results: Sequence[PartResult]) -> ScriptResult:
    """One result from the partitions' (that ran with consistent external holds)."""
    hold = np.minimum.reduce([r.state_hold for r in results])
    ow = np.minimum(columns.iw_after, hold)
    event = np.concatenate([r.pane_event for r in results])
    order = np.argsort(event, kind="stable")
    panes = PaneColumns.concat([r.pane_columns for r in results]).take(order)
    dropped: dict[str, int] = {}
    for r in results:
        for k, v in r.dropped.items():
            dropped[k] = dropped.get(k, 0) + v
    paths = {r.path for r in results}
    refusals = [r.refusal for r in results if r.refusal is not None]
    return ScriptResult(
        [],
        event[order],
        columns.pt_after,
        columns.iw_after,
        ow,
        dropped,
        sum(r.late_elements for r in results),
        bool(ow[-1] < MAX_TIMESTAMP),
        sum(r.pending_processing_timers for r in results),
        state_hold=hold,
        pane_columns=panes,
        path=paths.pop() if len(paths) == 1 else "mixed",
        refusal=refusals[0] if refusals else None,
    )
