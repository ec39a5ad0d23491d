"""Whether ``simulate --engine spark``'s result
(:func:`spark_backend.simulate.simulation.simulate_keyed`) equals the local simulator's:
every stage's series and counts, and its late elements and panes read back from the
output files (for tests and benchmarks: it loads them all). Times are µs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from spark_backend.simulate.simulation import KeyedSimulation, KeyedStage
from theory.pipeline.simulator import PaneTable, SimulationResult, StageResult, differences

__all__ = ["keyed_differences"]


def _read(folder: Path, columns: list[str]) -> dict[str, np.ndarray]:
    """The columns of every part-P.parquet file in ``folder`` (none: empty)."""
    files = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    tables = [pq.read_table(f, columns=columns) for f in files]
    return {
        c: np.concatenate([t.column(c).to_numpy(zero_copy_only=False) for t in tables])
        if tables
        else np.empty(0)
        for c in columns
    }


def keyed_differences(local: SimulationResult, keyed: KeyedSimulation) -> list[str]:
    """What differs (empty: identical): the time grid, and per stage its series and
    counts (:func:`theory.pipeline.simulator.differences`), its late elements (as
    (arrival, timestamp) rows) and every field of every pane, panes in the local order
    (fire time, key rank, window, pane index)."""
    return differences(local, keyed, _file_differences)


def _file_differences(name: str, x: StageResult, y: KeyedStage) -> list[str]:
    """Late elements and panes of stage ``name``: the local result's against the files."""
    out = []
    if (x.kind, x.late_count) != (y.kind, y.late_count):
        out.append(f"{name}: kind or late count")
    late = _read(y.late_files, ["arrival", "timestamp"])
    mine = np.lexsort((late["timestamp"], late["arrival"]))
    theirs = np.lexsort((x.late_timestamp, x.late_arrival))
    if not (
        np.array_equal(late["arrival"][mine], x.late_arrival[theirs])
        and np.array_equal(late["timestamp"][mine], x.late_timestamp[theirs])
    ):
        out.append(f"{name}: late elements")
    if (x.panes is None) != (y.panes is None):
        out.append(f"{name}: panes on one side only")
    if x.panes is None or y.panes is None:
        return out
    fields = list(PaneTable.__dataclass_fields__)
    got = _read(y.panes.directory, [*fields, "key_rank"])
    order = np.lexsort([got[f] for f in ("index", "window_end", "window_start", "key_rank",
                                         "fire_time")])  # fmt: skip
    if len(x.panes) != len(y.panes) or len(x.panes) != order.size:
        return [*out, f"{name}: {len(x.panes)} panes != {len(y.panes)}"]
    for f in fields:
        u, v = getattr(x.panes, f), got[f][order]
        if not np.array_equal(u, v, equal_nan=u.dtype.kind == "f"):
            out.append(f"{name}: panes' {f}")
    return out
