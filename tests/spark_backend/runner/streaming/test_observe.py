"""The watermark table and label resolution of :mod:`spark_backend.runner.streaming.observe`,
on made-up series and a pipeline's proto (no Spark)."""

from __future__ import annotations

import io
import logging
import sys
from typing import Any

import apache_beam as beam
import numpy as np
import pytest

from spark_backend.runner.streaming.driver import show_progress
from spark_backend.runner.streaming.observe import (
    WatermarkTable,
    Why,
    composite_leaves,
    resolve_label,
    show_time,
)
from theory.series import StepSeries
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, SECOND


def steps(times: list[int], values: list[int], initial: int = MIN_TIMESTAMP) -> StepSeries:
    return StepSeries.from_events(np.asarray(times), np.asarray(values), initial=initial)


TABLE = WatermarkTable(
    {
        "read": {
            "input": steps([0, 10], [MIN_TIMESTAMP, 5 * SECOND]),
            "output": steps([0, 10], [MIN_TIMESTAMP, 5 * SECOND]),
        },
        "GBK": {
            "input": steps([0, 10, 20], [MIN_TIMESTAMP, 5 * SECOND, MAX_TIMESTAMP]),
            "output": steps([0, 10, 20], [MIN_TIMESTAMP, 3 * SECOND, MAX_TIMESTAMP]),
            "state:pending-windows": steps(
                [10, 20], [3 * SECOND, MAX_TIMESTAMP], initial=MAX_TIMESTAMP
            ),
        },
    }
)


def test_times_show_as_iso_and_infinities() -> None:
    assert show_time(MIN_TIMESTAMP) == "-∞"
    assert show_time(MAX_TIMESTAMP) == "+∞"
    assert show_time(5 * SECOND) == "1970-01-01T00:00:05Z"


def test_the_table_at_the_end_and_at_a_time() -> None:
    end = str(TABLE).splitlines()
    assert end[0] == "watermarks at the end"
    assert end[1].split() == ["transform", "input", "output", "holds"]
    assert end[3].split() == ["GBK", "+∞", "+∞"]
    mid = str(TABLE.at(15)).splitlines()
    assert mid[2].split() == ["read", "1970-01-01T00:00:05Z", "1970-01-01T00:00:05Z"]
    assert mid[3].split() == [
        "GBK",
        "1970-01-01T00:00:05Z",
        "1970-01-01T00:00:03Z",
        "state:pending-windows",
        "1970-01-01T00:00:03Z",
    ]
    assert TABLE.at(15).rows()[1] == (
        "GBK",
        5 * SECOND,
        3 * SECOND,
        {"state:pending-windows": 3 * SECOND},
    )
    html = TABLE.at(5)._repr_html_()
    assert "<td>read</td><td>-∞</td><td>-∞</td>" in html


def test_the_table_keeps_the_raw_series() -> None:
    assert list(TABLE) == ["read", "GBK"]
    assert int(TABLE["GBK"]["output"].values[1]) == 3 * SECOND


def _proto() -> Any:
    p = beam.Pipeline()
    kvs = p | "read" >> beam.Create([("a", 1)])
    _ = kvs | "Fixed/CombinePerKey(sum)" >> beam.CombinePerKey(sum)
    return p.to_runner_api()


def test_a_composite_label_resolves_to_its_lowest_leaf() -> None:
    composites = composite_leaves(_proto())
    leaves = composites["Fixed/CombinePerKey(sum)"]
    assert len(leaves) >= 2 and all(x.startswith("Fixed/CombinePerKey(sum)/") for x in leaves)
    every = [leaf for ls in composites.values() for leaf in ls]
    outputs = {leaf: i for i, leaf in enumerate(leaves)}  # the first one lowest
    got = resolve_label("Fixed/CombinePerKey(sum)", every, composites, lambda x: outputs.get(x, 99))
    assert got == leaves[0]
    tie = resolve_label("Fixed/CombinePerKey(sum)", every, composites, lambda x: 0)
    assert tie == leaves[-1]  # downstream on a tie
    assert resolve_label(leaves[0], every, composites, lambda x: 0) == leaves[0]


def test_an_unknown_label_names_the_close_ones() -> None:
    composites = composite_leaves(_proto())
    every = [leaf for ls in composites.values() for leaf in ls]
    with pytest.raises(
        KeyError,
        match=r"no transform labelled 'Fixed/CombinePerKey\(summ\)'.*"
        r"close: 'Fixed/CombinePerKey\(sum\)'",
    ):
        resolve_label("Fixed/CombinePerKey(summ)", every, composites, lambda x: 0)


def test_why_is_the_chain_with_the_drops() -> None:
    why = Why([("GBK", "input"), ("read", "source:watermark")], {"GBK": 2})
    assert why == [("GBK", "input"), ("read", "source:watermark")]
    assert str(why).splitlines() == [
        "GBK: input",
        "read: source:watermark",
        "GBK: droppedDueToLateness 2",
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_batch_progress_line_shows_on_a_terminal_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("spark_backend.runner.streaming.driver")
    monkeypatch.setattr(logger, "level", logging.WARNING)
    terminal, pipe = _Terminal(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", terminal)
    show_progress("batch 3: 1 Spark job(s) in 0.10 s")
    monkeypatch.setattr(sys, "stderr", pipe)
    show_progress("batch 4: 1 Spark job(s) in 0.10 s")
    assert terminal.getvalue() == "PySparkRunner batch 3: 1 Spark job(s) in 0.10 s\n"
    assert pipe.getvalue() == ""  # not a terminal: quiet
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(logger, "level", logging.INFO)
    with caplog.at_level(logging.INFO, logger=logger.name):
        show_progress("batch 5: 1 Spark job(s) in 0.10 s")
    assert [r.getMessage() for r in caplog.records] == ["batch 5: 1 Spark job(s) in 0.10 s"]
    assert "batch 5" not in terminal.getvalue()  # logged, not printed a second time
