"""Uncertainty of a comparison: intervals over seeds, and bootstrap intervals over windows.

- Over seeds (:func:`over_seeds`): a seeded experiment run once per seed of
  :func:`sweep_seeds` (the base seed, then seeds derived from it); each metric's mean
  over the N seeds and its 95 % Student-t interval ``mean ± t(0.975, N-1) · s / √N``
  (``s`` the sample standard deviation, :func:`t_interval`). N = 1 gives the mean and
  no interval (its bounds are None).
- Over windows (:func:`bootstrap_windows`): one trace is exact, so its uncertainty is
  the windows': each strategy's windows (``windows.parquet``'s rows) resampled with
  replacement B times, the per-window metrics recomputed on each resample, and the 2.5th
  and 97.5th percentiles of the B values (numpy's linear percentiles) are the interval.

Both return an :class:`IntervalTable`, whose columns name their units as the command
line's tables do: a metric ``x_us`` (µs) gives ``x_mean_us``, ``x_ci_low_us`` and
``x_ci_high_us``, integers rounded to the nearest µs (halves to even); any other metric
``x`` gives ``x_mean``, ``x_ci_low`` and ``x_ci_high``; none (blank, null) where there
is no value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from theory.experiments.html import html_table

__all__ = [
    "BOOTSTRAP_METRICS",
    "CONFIDENCE",
    "IntervalTable",
    "bootstrap_windows",
    "over_seeds",
    "seed_table",
    "sweep_seeds",
    "t_interval",
]

#: The confidence level of every interval here.
CONFIDENCE = 0.95

#: The per-window metrics :func:`bootstrap_windows` gives intervals for (the point
#: estimates are those of ``analyze``'s strategies table); every other column of that
#: table counts or measures the whole trace and is exact.
BOOTSTRAP_METRICS = (
    "completeness_mean",
    "complete_fraction",
    "window_latency_p50_us",
    "window_latency_p90_us",
    "window_latency_p99_us",
    "final_completeness_mean",
)

Table = Mapping[str, Sequence[object]]


@dataclass(frozen=True)
class IntervalTable:
    """A column table of intervals (a dict of equal-length lists, units in the column
    names); ``print`` gives text, a notebook shows ``_repr_html_``."""

    title: str
    columns: dict[str, list[object]]

    def __getitem__(self, name: str) -> list[object]:
        return self.columns[name]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))

    def to_arrow(self) -> pa.Table:
        """The table in Arrow: ``_us`` columns int64, other numbers float64 (or int64
        where every cell is an integer), none as null."""
        arrays = {}
        for name, values in self.columns.items():
            if name.endswith("_us"):
                arrays[name] = pa.array(values, pa.int64())
            elif all(isinstance(v, str) for v in values):
                arrays[name] = pa.array(values, pa.string())
            elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                arrays[name] = pa.array(values, pa.int64())
            else:
                arrays[name] = pa.array(values, pa.float64())
        return pa.table(arrays)

    def _cells(self) -> list[list[str]]:
        return [[_text(v) for v in row] for row in zip(*self.columns.values(), strict=True)]

    def __str__(self) -> str:
        rows = [list(self.columns), *self._cells()]
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        lines = [self.title]
        for r in rows:
            lines.append("  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return html_table(self.columns, self.title)


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def sweep_seeds(base: int, n: int) -> tuple[int, ...]:
    """The ``n`` seeds of a sweep from ``base``: ``base`` itself, then for i = 1, 2, ...
    the first 32-bit word of ``numpy.random.SeedSequence((base, i))``'s state (one
    already taken is skipped). ValueError unless ``n >= 1`` and ``0 <= base < 2**63``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"seeds must be an integer >= 1, got {n!r}")
    if isinstance(base, bool) or not isinstance(base, int) or not 0 <= base < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {base!r}")
    seeds = [base]
    i = 1
    while len(seeds) < n:
        s = int(np.random.SeedSequence((base, i)).generate_state(1, np.uint32)[0])
        if s not in seeds:
            seeds.append(s)
        i += 1
    return tuple(seeds)


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, ...]:
    """``(mean, low, high)`` of ``values`` (one per seed): ``mean ± t · s / √N`` with
    ``t`` Student's ``(1 + confidence) / 2`` quantile on ``N - 1`` degrees of freedom and
    ``s`` the sample standard deviation (``ddof=1``). One value: ``(value, nan, nan)``;
    a value that is not finite (none, NaN, inf): all three NaN."""
    from scipy.special import stdtrit  # Student's t quantile

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    if x.size == 0 or not np.isfinite(x).all():
        return (math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if x.size == 1:
        return (mean, math.nan, math.nan)
    t = float(stdtrit(x.size - 1, (1 + confidence) / 2))
    half = t * float(x.std(ddof=1)) / math.sqrt(x.size)
    return (mean, mean - half, mean + half)


def _metrics(table: Table, by: str) -> list[str]:
    """The metric columns of a table: numbers (not flags) other than ``by``; a time
    (an ``x_us`` column with ``x_utc`` beside it) is no metric."""
    out = []
    for name, values in table.items():
        if name == by or name.endswith("_utc"):
            continue
        if name.endswith("_us") and f"{name[:-3]}_utc" in table:
            continue
        present = [v for v in values if v is not None]
        numbers = all(
            isinstance(v, (int, float, np.integer, np.floating))
            and not isinstance(v, (bool, np.bool_))
            for v in present
        )
        if numbers and (present or name.endswith("_us")):
            out.append(name)
    return out


def _names(metric: str) -> tuple[str, str]:
    """``(base, unit suffix)`` of a metric: ``x_us`` -> (x, _us), else (x, '')."""
    if metric.endswith("_us"):
        return metric[:-3], "_us"
    return metric, ""


def _cell(value: float, us: bool) -> object:
    """A number as a cell: None for NaN, an int (halves to even) in an ``_us`` column."""
    if math.isnan(value):
        return None
    return round(value) if us else value


def seed_table(
    tables: Sequence[Table], seeds: Sequence[int], by: str = "strategy"
) -> IntervalTable:
    """Each metric's mean and :data:`CONFIDENCE` t interval (:func:`t_interval`) over
    ``tables``, one per seed of ``seeds``, rows matched by the ``by`` column (the same
    values in the same order in each, else ValueError). Columns: ``by``, ``seeds`` (N),
    then per metric its mean and interval bounds (module docstring)."""
    if len(tables) != len(seeds) or not tables:
        raise ValueError(
            f"need one table per seed, got {len(tables)} tables for {len(seeds)} seeds"
        )
    rows = list(tables[0][by])
    for seed, t in zip(seeds, tables, strict=True):
        if list(t[by]) != rows:
            raise ValueError(f"seed {seed}: {by} rows {list(t[by])} differ from {rows}")
    out: dict[str, list[object]] = {by: rows, "seeds": [len(tables)] * len(rows)}
    for metric in _metrics(tables[0], by):
        base, unit = _names(metric)
        got = [t_interval([t[metric][i] for t in tables]) for i in range(len(rows))]  # type: ignore[misc]
        for j, stat in enumerate(("mean", "ci_low", "ci_high")):
            out[f"{base}_{stat}{unit}"] = [_cell(g[j], bool(unit)) for g in got]
    n = len(tables)
    return IntervalTable(
        f"mean and {CONFIDENCE:.0%} t interval over {n} seed{'s' * (n != 1)} "
        f"({', '.join(map(str, seeds))})",
        out,
    )


def over_seeds(
    run: Callable[[int], Table],
    n: int,
    *,
    base_seed: int = 0,
    by: str = "strategy",
    on_seed: Callable[[int, int], None] | None = None,
) -> IntervalTable:
    """Run ``run(seed)`` (a seeded experiment returning a column table, e.g.
    ``lambda s: tradeoff(make_trace(s), strategies, window_size=w).table()``) for the
    ``n`` seeds of :func:`sweep_seeds` from ``base_seed``, and tabulate each metric's mean
    and t interval (:func:`seed_table`). ``on_seed(i, seed)`` is called after each run
    (progress)."""
    seeds = sweep_seeds(base_seed, n)
    tables = []
    for i, seed in enumerate(seeds):
        tables.append(run(seed))
        if on_seed is not None:
            on_seed(i, seed)
    return seed_table(tables, seeds, by)


def _column(windows: pa.Table | Table, name: str) -> np.ndarray:
    if isinstance(windows, pa.Table):
        if name not in windows.column_names:
            raise ValueError(f"windows table: no column {name!r}")
        return np.asarray(windows.column(name).to_pylist(), dtype=object)
    if name not in windows:
        raise ValueError(f"windows table: no column {name!r}")
    return np.asarray(list(windows[name]), dtype=object)


def _percentiles_of_counts(
    values: np.ndarray, counts: np.ndarray, qs: Sequence[float]
) -> np.ndarray:
    """numpy's linear percentiles ``qs`` (0-100) of each row's multiset: ``values``
    (sorted ascending) each taken ``counts[r, j]`` times; NaN for an empty row.
    Shape (rows, len(qs))."""
    cum = np.cumsum(counts, axis=1)
    k = cum[:, -1] if cum.shape[1] else np.zeros(counts.shape[0], dtype=np.int64)
    out = np.full((counts.shape[0], len(qs)), np.nan)
    has = k > 0
    if not has.any() or not values.size:
        return out
    # each row's cumulative counts, shifted past the previous row's: one sorted array
    m = values.size
    step = int(k.max()) + 1
    flat = (cum + (np.arange(cum.shape[0], dtype=np.int64) * step)[:, None]).ravel()
    for j, percent in enumerate(qs):
        q = percent / 100
        pos = (k - 1) * q  # numpy's virtual index of the linear method
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, np.maximum(k - 1, 0))
        frac = pos - lo
        v_lo, v_hi = values[_rank(flat, lo, m, step)], values[_rank(flat, hi, m, step)]
        d = v_hi - v_lo
        got = np.where(frac >= 0.5, v_hi - d * (1 - frac), v_lo + d * frac)
        out[:, j] = np.where(has, got, np.nan)
    return out


def _rank(flat: np.ndarray, r: np.ndarray, m: int, step: int) -> np.ndarray:
    """Per row, the index of its ``r``-th smallest value (0-based): the first value
    whose cumulative count exceeds ``r`` (:func:`_percentiles_of_counts`'s layout)."""
    rows = np.arange(r.size, dtype=np.int64)
    at = np.searchsorted(flat, r + rows * step, side="right") - rows * m
    return np.clip(at, 0, m - 1)


def bootstrap_windows(
    windows: pa.Table | Table,
    resamples: int,
    seed: int = 0,
    *,
    include_end_of_input: bool = False,
    late_firings: bool = False,
    confidence: float = CONFIDENCE,
) -> IntervalTable:
    """Bootstrap percentile intervals over windows, per strategy, from
    ``windows.parquet``'s columns (``strategy``, ``key``, ``window_start_us``,
    ``elements``, ``final_count``, ``completeness_at_first_firing``, ``latency_us``
    (null: never fired), ``fired_by_end_of_input``).

    Each strategy's windows, in (key, window start) order, are drawn ``resamples`` times
    with replacement (``numpy.random.default_rng(seed)``, the same draws for every
    strategy); each draw gives ``completeness_mean`` and ``complete_fraction`` (all its
    windows), ``window_latency_p50/p90/p99_us`` (its fired windows; those fired by the
    end of input only with ``include_end_of_input``) and, with ``late_firings``,
    ``final_completeness_mean``. The interval of a metric is the ``(1 - confidence) / 2``
    and ``(1 + confidence) / 2`` percentiles of its values over the draws where it has one.
    Columns: ``strategy``, ``windows``, ``resamples``, then each metric's estimate (on
    the windows as they are) and interval bounds."""
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be an integer >= 1, got {resamples!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    strategy = _column(windows, "strategy").astype(str)
    key = _column(windows, "key")
    start = _column(windows, "window_start_us").astype(np.int64)
    comp = _column(windows, "completeness_at_first_firing").astype(np.float64)
    latency = _column(windows, "latency_us")
    eoi = _column(windows, "fired_by_end_of_input").astype(bool)
    final = (
        _column(windows, "final_count").astype(np.float64)
        / _column(windows, "elements").astype(np.float64)
        if late_firings else None
    )
    fired = np.array([v is not None for v in latency], dtype=bool)
    lat = np.array([0 if v is None else v for v in latency], dtype=np.int64)
    names = list(dict.fromkeys(strategy.tolist()))
    metrics = [m for m in BOOTSTRAP_METRICS if late_firings or m != "final_completeness_mean"]
    lo_q, hi_q = 50 * (1 - confidence), 50 * (1 + confidence)
    out: dict[str, list[object]] = {"strategy": names, "windows": [], "resamples": []}
    for m in metrics:
        base, unit = _names(m)
        for suffix in ("", "_ci_low", "_ci_high"):
            out[f"{base}{suffix}{unit}"] = []
    for name in names:
        rows = np.flatnonzero(strategy == name)
        counted = fired & (include_end_of_input | ~eoi)
        # the estimates in the table's row order (the strategies table's sums)
        point = _estimates(
            comp[rows], lat[rows][counted[rows]], None if final is None else final[rows]
        )
        order = sorted(range(rows.size), key=lambda i: (str(key[rows[i]]), int(start[rows[i]])))
        rows = rows[np.asarray(order, dtype=np.int64)]
        stats = _draws(
            comp[rows], lat[rows], counted[rows], None if final is None else final[rows],
            resamples, seed,
        )
        out["windows"].append(int(rows.size))
        out["resamples"].append(resamples)
        for m in metrics:
            base, unit = _names(m)
            v = stats[m]
            v = v[~np.isnan(v)]
            low, high = (np.percentile(v, [lo_q, hi_q]) if v.size else (math.nan, math.nan))
            out[f"{base}{unit}"].append(_cell(point[m], bool(unit)))
            out[f"{base}_ci_low{unit}"].append(_cell(float(low), bool(unit)))
            out[f"{base}_ci_high{unit}"].append(_cell(float(high), bool(unit)))
    return IntervalTable(
        f"{confidence:.0%} bootstrap percentile intervals over windows "
        f"({resamples} resamples, seed {seed})",
        out,
    )


def _estimates(comp: np.ndarray, lat: np.ndarray, final: np.ndarray | None) -> dict[str, float]:
    """Each metric on the windows as they are, as the strategies table computes it
    (:func:`theory.experiments.first_panes.summary_row`); ``lat``: the counted
    latencies (µs)."""
    pcts = np.percentile(lat.astype(np.float64), [50, 90, 99]) if lat.size else [math.nan] * 3
    return {
        "completeness_mean": float(comp.mean()) if comp.size else math.nan,
        "complete_fraction": float(np.mean(comp >= 1.0)) if comp.size else math.nan,
        "window_latency_p50_us": float(pcts[0]),
        "window_latency_p90_us": float(pcts[1]),
        "window_latency_p99_us": float(pcts[2]),
        "final_completeness_mean": (
            float(final.mean()) if final is not None and final.size else math.nan
        ),
    }


#: Cells of the count matrix drawn at once (rows of resamples x windows).
_CHUNK_CELLS = 2_000_000


def _draws(
    comp: np.ndarray,
    lat: np.ndarray,
    counted: np.ndarray,
    final: np.ndarray | None,
    resamples: int,
    seed: int,
) -> dict[str, np.ndarray]:
    """Each metric over ``resamples`` draws with replacement of the windows.
    ``counted``: the windows whose latency counts."""
    n = comp.size
    order = np.argsort(lat[counted], kind="stable")
    lat_sorted = lat[counted][order].astype(np.float64)
    counted_idx = np.flatnonzero(counted)[order]
    complete = (comp >= 1.0).astype(np.float64)
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {m: [] for m in BOOTSTRAP_METRICS}
    todo = resamples
    step = max(1, _CHUNK_CELLS // max(n, 1))
    while todo > 0:
        c = min(step, todo)
        todo -= c
        idx = rng.integers(0, n, size=(c, n)) if n else np.zeros((c, 0), np.int64)
        offsets = (np.arange(c, dtype=np.int64) * n)[:, None]
        counts = np.bincount((idx + offsets).ravel(), minlength=c * n).reshape(c, n)
        total = max(n, 1)
        parts["completeness_mean"].append(counts @ comp / total if n else np.full(c, np.nan))
        parts["complete_fraction"].append(counts @ complete / total if n else np.full(c, np.nan))
        pct = _percentiles_of_counts(lat_sorted, counts[:, counted_idx], (50, 90, 99))
        parts["window_latency_p50_us"].append(pct[:, 0])
        parts["window_latency_p90_us"].append(pct[:, 1])
        parts["window_latency_p99_us"].append(pct[:, 2])
        parts["final_completeness_mean"].append(
            counts @ final / total if final is not None and n else np.full(c, np.nan)
        )
    return {m: np.concatenate(v) for m, v in parts.items()}
