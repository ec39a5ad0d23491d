"""``theory.read_trace(time_unit=...)``: the command line's ``--time-unit`` rule in the
Python reader. Epoch s/ms/ns given without a unit are refused naming the likely unit;
with a unit they are converted to µs exactly as the command line's reader converts them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import theory
from spark_backend.traces.trace_input import read_local

#: 2024-01-01T00:00:00Z in epoch milliseconds, and three later arrivals.
EPOCH_MS = 1_704_067_200_000


def _csv(tmp_path: Path, scale: int, name: str = "t.csv") -> Path:
    path = tmp_path / name
    rows = [
        (EPOCH_MS * scale + i * 7 * scale, EPOCH_MS * scale + (i + 1) * 9 * scale) for i in range(4)
    ]
    path.write_text("event_time,arrival_time\n" + "".join(f"{e},{a}\n" for e, a in rows))
    return path


@pytest.mark.parametrize(
    ("unit", "scale", "named"),
    [("ms", 1, "epoch milliseconds"), ("s", 1, None), ("ns", 1_000_000, "epoch nanoseconds")],
)
def test_epoch_times_without_a_unit_are_refused_naming_it(
    tmp_path: Path, unit: str, scale: int, named: str | None
) -> None:
    path = _csv(tmp_path, scale) if unit != "s" else _seconds(tmp_path)
    with pytest.raises(ValueError, match=f"time_unit={unit!r}") as err:
        theory.read_trace(path)
    assert "event_time" in str(err.value)
    if named:
        assert named in str(err.value)


def _seconds(tmp_path: Path) -> Path:
    path = tmp_path / "s.csv"
    path.write_text(f"event_time,arrival_time\n{EPOCH_MS // 1000},{EPOCH_MS // 1000 + 3}\n")
    return path


@pytest.mark.parametrize(("unit", "scale"), [("ms", 1), ("us", 1_000), ("ns", 1_000_000)])
def test_a_unit_converts_to_microseconds_as_the_command_line_does(
    tmp_path: Path, unit: str, scale: int
) -> None:
    path = _csv(tmp_path, scale)
    trace, report = theory.read_trace(path, time_unit=unit)
    cli, _ = read_local(path, "fail", unit)
    expected = np.array([EPOCH_MS * 1000 + i * 7000 for i in range(4)], dtype=np.int64)
    np.testing.assert_array_equal(trace.event_time, expected)
    np.testing.assert_array_equal(trace.event_time, cli.event_time)
    np.testing.assert_array_equal(trace.arrival_time, cli.arrival_time)
    assert report.rows_read == 4


def test_nanoseconds_are_floored(tmp_path: Path) -> None:
    path = tmp_path / "ns.csv"
    path.write_text("event_time,arrival_time\n-1,1999\n")
    trace, _ = theory.read_trace(path, time_unit="ns")
    assert (int(trace.event_time[0]), int(trace.arrival_time[0])) == (-1, 1)


def test_relative_microseconds_need_no_unit(tmp_path: Path) -> None:
    path = tmp_path / "rel.csv"
    path.write_text("event_time,arrival_time\n0,1000000\n2000000,3000000\n")
    trace, _ = theory.read_trace(path)
    assert trace.event_time.tolist() == [0, 2_000_000]


def test_a_timestamp_column_is_never_scaled(tmp_path: Path) -> None:
    path = tmp_path / "ts.parquet"
    micros = EPOCH_MS * 1000
    table = pa.table(
        {
            "event_time": pa.array([micros], pa.timestamp("us", tz="UTC")),
            "arrival_time": pa.array([EPOCH_MS + 5], pa.int64()),
        }
    )
    pq.write_table(table, path)
    trace, _ = theory.read_trace(path, time_unit="ms")
    assert int(trace.event_time[0]) == micros
    assert int(trace.arrival_time[0]) == (EPOCH_MS + 5) * 1000


@pytest.mark.parametrize("unit", ["minutes", "MS", 1000])
def test_a_bad_unit_is_one_clear_error(tmp_path: Path, unit: object) -> None:
    path = _csv(tmp_path, 1)
    with pytest.raises((ValueError, TypeError), match="time_unit"):
        theory.read_trace(path, time_unit=unit)  # type: ignore[arg-type]


def test_a_value_out_of_range_once_converted_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    path.write_text(f"event_time,arrival_time\n{2**62},{2**62}\n")
    with pytest.raises(ValueError, match="outside the µs timestamp range"):
        theory.read_trace(path, time_unit="ms")
