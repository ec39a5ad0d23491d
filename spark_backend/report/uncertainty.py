"""The report's uncertainty sections: the intervals over seeds (``demo --seeds N``) and
the bootstrap intervals over windows (``analyze --bootstrap N``), each a table written
whole as CSV (:mod:`theory.experiments.uncertainty`'s columns) and shown in the page in
part (the headline metrics)."""

from __future__ import annotations

from collections.abc import Callable

from spark_backend.report.report import Report, percent, seconds
from theory.experiments.uncertainty import IntervalTable

__all__ = ["bootstrap_section", "seeds_section"]

#: The metrics the page shows of an interval table (the CSV has them all).
HEADLINE = ("completeness_mean", "window_latency_p50", "window_latency_p99", "late_fraction")


def _shown(columns: dict[str, list[object]], first: tuple[str, ...]) -> list[str]:
    """``first``, then each headline metric's columns that the table has."""
    out = list(first)
    for metric in HEADLINE:
        out += [c for c in columns if c.removesuffix("_us").startswith(metric)
                and c.removesuffix("_us")[len(metric):] in ("", "_mean", "_ci_low", "_ci_high")]
    return out


def _formats(columns: dict[str, list[object]]) -> dict[str, Callable[[object], str]]:
    """µs as seconds, fractions (completeness, late fraction) as percentages."""
    fmt: dict[str, Callable[[object], str]] = {}
    for c in columns:
        if c.endswith("_us"):
            fmt[c] = seconds
        elif "completeness" in c or "fraction" in c:
            fmt[c] = percent
    return fmt


def seeds_section(report: Report, table: IntervalTable, how: str) -> None:
    """The ``seeds`` table: each strategy's metrics over the seeds; ``how`` says which
    engine and traces ran them."""
    n = table["seeds"][0] if len(table) else 0
    report.table(
        "seeds",
        "Over seeds: mean and 95 % confidence interval",
        table.columns,
        f"The comparison run on {n} seeded traces ({how}); each metric's mean over the "
        "seeds and its 95 % Student-t interval, mean ± t(0.975, N−1)·s/√N with s the "
        "sample standard deviation over the N seeds (blank with one seed, or where a "
        "seed has no value; not clipped to the metric's range, so a bound past 100 % or "
        f"below 0 s says N is too small). {table.title}. The page shows the headline metrics; "
        "seeds.csv every one.",
        _formats(table.columns),
        show_columns=_shown(table.columns, ("strategy", "seeds")),
    )


def bootstrap_section(report: Report, table: IntervalTable) -> None:
    """The ``bootstrap`` table: each strategy's per-window metrics with their bootstrap
    percentile intervals."""
    report.table(
        "bootstrap",
        "Bootstrap intervals over windows",
        table.columns,
        "The trace is exact; these intervals say how much the per-window metrics depend "
        "on which windows the trace happened to hold: each strategy's windows resampled "
        "with replacement, the metric recomputed on each resample, and the 2.5th and "
        "97.5th percentiles of the resampled values. The counts of the whole trace "
        "(late_count, dropped, windows, end_of_input_windows) and the source lag are "
        f"exact and have none. {table.title}. The page shows the headline metrics; "
        "bootstrap.csv every one.",
        _formats(table.columns),
        show_columns=_shown(table.columns, ("strategy", "windows", "resamples")),
    )
