"""Window fns, AfterProcessingTime and allowed lateness take timedeltas and duration
strings; a bare int stays µs."""

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory import AfterProcessingTime, FixedWindows, Sessions, SlidingWindows, WindowingStrategy
from theory.columns import as_duration, as_offset
from theory.time import MINUTE, SECOND


def test_strings_and_timedeltas_mean_what_they_say() -> None:
    assert FixedWindows("60s") == FixedWindows(60 * SECOND)
    assert FixedWindows(dt.timedelta(minutes=1), "-15s") == FixedWindows(MINUTE, 45 * SECOND)
    assert SlidingWindows("1m", dt.timedelta(seconds=10), "5s") == SlidingWindows(
        MINUTE, 10 * SECOND, 5 * SECOND
    )
    assert Sessions("1.5s").gap == 1_500_000
    assert AfterProcessingTime("10s").delay == 10 * SECOND
    assert WindowingStrategy(FixedWindows("1m"), allowed_lateness="2m").allowed_lateness == (
        2 * MINUTE
    )
    assert FixedWindows(dt.timedelta(microseconds=7)).size == 7


def test_a_bare_int_stays_microseconds() -> None:
    assert FixedWindows(60).size == 60
    assert Sessions(60).gap == 60


@given(st.timedeltas(min_value=dt.timedelta(microseconds=1), max_value=dt.timedelta(days=10**5)))
def test_timedelta_is_exact(td: dt.timedelta) -> None:
    micros = as_duration(td, "d")
    assert dt.timedelta(microseconds=micros) == td
    assert as_offset(-td, "o") == -micros


def test_bad_durations_name_the_parameter() -> None:
    with pytest.raises(ValueError, match=r"size: bad duration '60 parsecs'"):
        FixedWindows("60 parsecs")
    with pytest.raises(ValueError, match="gap must be > 0"):
        Sessions(dt.timedelta(0))
    with pytest.raises(ValueError, match="period must be > 0"):
        SlidingWindows("1m", "0s")
    with pytest.raises(ValueError, match="allowed_lateness must be >= 0"):
        WindowingStrategy(FixedWindows("1m"), allowed_lateness=-dt.timedelta(seconds=1))
    with pytest.raises(TypeError, match="size must be an integer number of microseconds"):
        FixedWindows(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="offset: bad duration"):
        FixedWindows("1m", "--5s")
