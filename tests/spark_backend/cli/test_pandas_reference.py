"""`analyze`'s outputs against an independent pandas reference (issue 33, "Done means").

For three seeded traces of different shapes (bursts with arrivals tied to 10 ms, an idle
partition, stragglers with late firings), every column of the strategies table and of
windows.parquet, on both engines, equals tests/helpers/pandas_reference.py: a reference
written from docs/semantics.md alone, with numpy and pandas, importing none of theory's
or spark_backend's implementations of the semantics (theory only generates the traces).
One comparison per trace and engine.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from spark_backend.cli.local import compare_local
from spark_backend.report.comparison import compare
from spark_backend.report.window_table import window_table
from tests.helpers.pandas_reference import reference
from theory.data.generators import generate_trace
from theory.experiments.first_panes import FIRE_ONCE, Firing

#: Every kind of source watermark a comparison runs.
SPECS = [
    "perfect", "perfect:oracle", "static", "bounded:20ms", "flink-bounded:20ms", "dynamic",
    "dynamic:idle=60ms", "flink-bounded:20ms:idle=100ms", "percentile:0.9",
    "percentile:0.5:hold",
]
WINDOW = 50_000  # µs

SECOND = 1_000_000


def _bursts():
    t = generate_trace(2_000, seed=11, bursts=3, keys=12, partitions=3)
    return dataclasses.replace(t, arrival_time=-(-t.arrival_time // 10_000) * 10_000)


def _idle_partition():
    return generate_trace(2_000, seed=12, keys=12, partitions=3, idle_partitions=(2,),
                          idle_interval=(SECOND // 2, 3 * SECOND // 2))


def _stragglers():
    return generate_trace(2_000, seed=13, keys=12, partitions=3, stragglers=0.05)


TRACES = {
    "bursts": (_bursts, FIRE_ONCE),
    "idle-partition": (_idle_partition, FIRE_ONCE),
    "stragglers": (_stragglers, Firing(allowed_lateness=100_000, late_firings=True)),
}


def _frame(t) -> pd.DataFrame:
    return pd.DataFrame({"event_time": t.event_time, "arrival_time": t.arrival_time,
                         "key": t.key, "partition": t.partition})


def _sorted(w: pd.DataFrame) -> pd.DataFrame:
    return w.sort_values(["strategy", "window_end_us", "key"], kind="stable").reset_index(
        drop=True)


@pytest.fixture(scope="module")
def results(spark):
    got = {}
    for name, (make, firing) in TRACES.items():
        t = make()
        frame = _frame(t)
        want = reference(frame, SPECS, WINDOW, firing.allowed_lateness, firing.late_firings)
        local = compare_local(t, SPECS, WINDOW, firing=firing, grid_points=2,
                              sample_elements=1)
        on_spark = compare(spark.createDataFrame(frame), SPECS, WINDOW, firing=firing,
                           views=False)  # the tables only
        got[name] = (want, {"local": local, "spark": on_spark})
    return got


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["local", "spark"])
@pytest.mark.parametrize("trace", list(TRACES))
def test_every_column_equals_the_pandas_reference(results, trace, engine):
    (table, per_window), engines = results[trace]
    c = engines[engine]
    got = pd.DataFrame(c.table)
    assert list(got["strategy"]) == SPECS
    for col in table.columns:
        np.testing.assert_array_equal(
            got[col].to_numpy(), table[col].to_numpy(), err_msg=f"{trace} {engine} {col}")
    mine = _sorted(window_table(c.windows).to_pandas())
    ref = _sorted(per_window)
    assert len(mine) == len(ref)
    for col in mine.columns:
        np.testing.assert_array_equal(
            mine[col].to_numpy(), ref[col].to_numpy(), err_msg=f"{trace} {engine} {col}")
    # the traces exercise what they are for
    rows = table.set_index("strategy")
    assert rows.loc["bounded:20ms", "late_count"] > 0
    assert (rows["end_of_input_windows"] > 0).any()
    if trace == "stragglers":
        assert rows.loc["bounded:20ms", "late_panes"] > 0
