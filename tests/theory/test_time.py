import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from theory import columns as C
from theory import time as T


def test_bounds_match_beam():
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

    assert MIN_TIMESTAMP.micros == T.MIN_TIMESTAMP
    assert MAX_TIMESTAMP.micros == T.MAX_TIMESTAMP
    assert GlobalWindow().end.micros == T.END_OF_GLOBAL_WINDOW


@given(st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)))
def test_datetime_round_trip(value):
    aware = value.replace(tzinfo=dt.UTC)
    assert T.to_datetime(T.from_datetime(aware)) == aware
    assert T.from_datetime(value) == T.from_datetime(aware)  # naive is UTC


@given(st.integers(-(10**12), 10**12))
def test_millis_round_trip(ms):
    assert T.to_millis(T.from_millis(ms)) == ms


def test_millis_floor_like_beam():
    assert T.to_millis(-1) == -1
    assert T.to_millis(1999) == 1


def test_seconds():
    assert T.from_seconds(1.5) == 1_500_000
    assert T.to_seconds(2_500_000) == 2.5


def test_check_timestamp_names_parameter():
    with pytest.raises(ValueError, match=r"watermark=.* outside"):
        C.check_timestamp(T.MAX_TIMESTAMP + 1, "watermark")
    with pytest.raises(TypeError, match="ts must be an integer"):
        C.check_timestamp(1.5, "ts")  # type: ignore[arg-type]


def test_check_duration():
    assert C.check_duration(0, "bound") == 0
    with pytest.raises(ValueError, match="bound must be >= 0"):
        C.check_duration(-1, "bound")
    with pytest.raises(ValueError, match="size must be > 0"):
        C.check_duration(0, "size", allow_zero=False)


def test_format_timestamp():
    assert T.format_timestamp(T.MIN_TIMESTAMP) == "-inf"
    assert T.format_timestamp(T.MAX_TIMESTAMP) == "+inf"
    assert T.format_timestamp(0) == "1970-01-01T00:00:00Z"
