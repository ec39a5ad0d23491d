"""Time units of integer time columns (issue 13 finding 1: epoch milliseconds were read
silently as µs): conversion to µs, and the magnitude check naming the likely unit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory.data.units import (
    check_magnitude,
    check_time_unit,
    likely_unit,
    numeric_time_columns,
    scale_to_us,
)
from theory.time import MAX_TIMESTAMP

# 2001-09-09 .. 2096-10-02 in epoch µs: real dates
REAL_US = st.integers(1_000_000_000_000_000, 3_990_000_000_000_000)


def test_each_unit_converts_to_microseconds() -> None:
    v = np.array([-1_500, 0, 1_700_000_000], dtype=np.int64)
    assert scale_to_us(v, "us", "t").tolist() == v.tolist()
    assert scale_to_us(v, "ms", "t").tolist() == [-1_500_000, 0, 1_700_000_000_000]
    assert scale_to_us(v, "s", "t").tolist() == [-1_500_000_000, 0, 1_700_000_000_000_000]
    # ns floor to the µs below, negative ones included
    assert scale_to_us(v, "ns", "t").tolist() == [-2, 0, 1_700_000]


def test_bad_units_and_overflow_are_named() -> None:
    with pytest.raises(ValueError, match=r"--time-unit must be one of us, ms, s, ns, got 'h'"):
        check_time_unit("h")
    with pytest.raises(TypeError, match="--time-unit"):
        check_time_unit(3)
    with pytest.raises(ValueError, match=r"event_time: .* s is outside the µs timestamp range"):
        scale_to_us(np.array([0, MAX_TIMESTAMP // 10]), "s", "event_time")


@given(REAL_US, st.integers(0, 10**12))
def test_epoch_ms_s_ns_given_as_us_are_caught(start: int, span: int) -> None:
    lo, hi = start, min(start + span, 3_990_000_000_000_000)
    check_magnitude(lo, hi, "event_time")  # real µs dates pass
    assert likely_unit(lo // 1000, hi // 1000) == "ms"
    assert likely_unit(lo // 1_000_000, hi // 1_000_000) == "s"
    assert likely_unit(lo * 1000, hi * 1000) == "ns"
    with pytest.raises(ValueError, match=r"arrival_time looks like epoch milli.*--time-unit ms"):
        check_magnitude(lo // 1000, hi // 1000, "arrival_time")


@given(st.integers(0, 10**8), st.integers(0, 10**11))
def test_relative_traces_near_zero_are_accepted(start: int, span: int) -> None:
    check_magnitude(start, start + span, "event_time")
    check_magnitude(-start, start, "event_time")


def test_the_message_names_both_readings() -> None:
    with pytest.raises(ValueError) as err:
        check_magnitude(1_700_000_000_000, 1_700_000_500_000, "event_time")
    text = str(err.value)
    assert "1970-01-20" in text and "2023-11-14" in text and "--time-unit us" in text


def test_numeric_columns_from_the_schema(tmp_path) -> None:
    (tmp_path / "a.csv").write_text(
        "event_time,arrival_time,key\n1700000000000,2024-01-01T00:00:00,1\n"
    )
    assert numeric_time_columns([tmp_path / "a.csv"]) == {"event_time"}
