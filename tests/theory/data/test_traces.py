"""Trace schema, validation rules and Parquet/CSV I/O."""

from __future__ import annotations

import datetime as dt
import os
import pickle
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.data import io as io_mod
from theory.data.errors import TraceError
from theory.data.io import read_trace, write_trace
from theory.data.report import BadRowReport
from theory.data.schema import RULES
from theory.data.trace import Trace
from theory.data.validate import validate_columns
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP, SECOND


def _trace(n: int = 6, *, string_keys: bool = False, optional: bool = True) -> Trace:
    et = np.arange(n, dtype=np.int64) * SECOND
    keys: np.ndarray = (
        np.array([f"user-{i % 3}" for i in range(n)], dtype=object)
        if string_keys
        else np.arange(n, dtype=np.int64) % 3
    )
    return Trace(
        et,
        et + 500,
        keys,
        np.linspace(0.5, 3.0, n),
        partition=np.arange(n, dtype=np.int64) % 2 if optional else None,
        publish_time=et + 100 if optional else None,
    )


# --------------------------------------------------------------------------- Trace


def test_trace_basics() -> None:
    t = _trace(6)
    assert len(t) == 6
    assert t.take([5, 0]).event_time.tolist() == [5 * SECOND, 0]
    sel = t.select(t.key == 1)
    assert sel.event_time.tolist() == [1 * SECOND, 4 * SECOND]
    assert sel.partition is not None and sel.partition.tolist() == [1, 0]
    dropped = t.with_columns(partition=None)
    assert dropped.partition is None and t.partition is not None
    with pytest.raises(TypeError, match="unknown column"):
        t.with_columns(colour=np.zeros(6))
    with pytest.raises(TypeError, match="boolean mask"):
        t.select(np.arange(6))
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        t.select(np.ones(5, dtype=bool))
    with pytest.raises(ValueError, match="value"):
        Trace(t.event_time, t.arrival_time, t.key, np.zeros(5))
    with pytest.raises(TypeError, match="event_time"):
        Trace(np.array([1.5]), np.array([2]), np.array([0]), np.array([1.0]))


def test_sorted_by_arrival_is_stable_with_event_time_ties() -> None:
    et = np.array([5, 3, 4, 1, 2], dtype=np.int64)
    at = np.array([10, 10, 9, 10, 10], dtype=np.int64)
    t = Trace(et, at, np.arange(5), np.zeros(5)).sorted_by_arrival()
    assert t.arrival_time.tolist() == [9, 10, 10, 10, 10]
    assert t.event_time.tolist() == [4, 1, 2, 3, 5]
    # Equal (arrival, event) keep their original order.
    t2 = Trace(np.zeros(3, np.int64), np.zeros(3, np.int64), np.array([7, 8, 9]), np.zeros(3))
    assert t2.sorted_by_arrival().key.tolist() == [7, 8, 9]


def test_concat() -> None:
    a, b = _trace(3), _trace(4)
    c = Trace.concat([a, b])
    assert len(c) == 7
    assert c.key.tolist() == a.key.tolist() + b.key.tolist()
    assert Trace.concat([]) == Trace.empty()
    with pytest.raises(ValueError, match="key"):
        Trace.concat([_trace(2), _trace(2, string_keys=True)])
    with pytest.raises(ValueError, match="partition"):
        Trace.concat([_trace(2), _trace(2).with_columns(partition=None)])


# --------------------------------------------------------------------------- I/O


@pytest.mark.parametrize("suffix", [".parquet", ".pq", ".csv"])
@pytest.mark.parametrize("string_keys", [False, True])
def test_round_trip(tmp_path: Path, suffix: str, string_keys: bool) -> None:
    t = _trace(8, string_keys=string_keys)
    path = tmp_path / f"trace{suffix}"
    write_trace(t, path)
    back, report = read_trace(path)
    assert report.ok and report.rows_read == 8 and report.total == 0
    assert back == t
    assert back.has_string_keys == string_keys
    assert back.key.dtype == (object if string_keys else np.int64)


def test_arrow_schema() -> None:
    tab = _trace(3, string_keys=True).to_arrow()
    assert tab.schema.field("event_time").type == pa.int64()
    assert tab.schema.field("key").type == pa.string()
    assert tab.schema.field("value").type == pa.float64()
    assert _trace(3, optional=False).to_arrow().column_names == [
        "event_time",
        "arrival_time",
        "key",
        "value",
    ]


timestamps = st.integers(MIN_TIMESTAMP, MAX_TIMESTAMP)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            timestamps,
            timestamps,
            st.integers(-(2**63), 2**63 - 1),
            st.floats(allow_nan=False, allow_infinity=False, width=64),
            st.text("abcxyz_", min_size=1, max_size=5),
        ),
        max_size=15,
    ),
    suffix=st.sampled_from([".parquet", ".csv"]),
    string_keys=st.booleans(),
)
def test_round_trip_property(rows: list, suffix: str, string_keys: bool) -> None:
    n = len(rows)
    keys = (
        np.array(["k" + r[4] for r in rows], dtype=object)
        if string_keys
        else np.array([r[2] for r in rows], dtype=np.int64)
    )
    t = Trace(
        np.array([r[0] for r in rows], dtype=np.int64),
        np.array([r[1] for r in rows], dtype=np.int64),
        keys if n else (np.zeros(0, object) if string_keys else np.zeros(0, np.int64)),
        np.array([r[3] for r in rows], dtype=np.float64),
    )
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"t{suffix}"
        write_trace(t, path)
        back, report = read_trace(path, allow_empty=True)
    assert report.ok
    assert len(back) == n
    assert np.array_equal(back.event_time, t.event_time)
    assert np.array_equal(back.arrival_time, t.arrival_time)
    assert np.array_equal(back.value, t.value)
    if n:
        assert back == t


def test_directory_read_in_name_order(tmp_path: Path) -> None:
    a, b, c = _trace(3), _trace(4), _trace(2)
    write_trace(b, tmp_path / "b.csv")
    write_trace(a, tmp_path / "a.parquet")
    write_trace(c, tmp_path / "c.pq")
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / ".hidden.csv").write_text("garbage")
    (tmp_path / "notes.txt").write_text("ignored")
    got, report = read_trace(tmp_path)
    assert got == Trace.concat([a, b, c])
    assert report.rows_read == 9


def test_directory_errors_name_file_and_global_row(tmp_path: Path) -> None:
    write_trace(_trace(3, optional=False), tmp_path / "part-0.parquet")
    (tmp_path / "part-1.csv").write_text(
        "event_time,arrival_time,key,value\n1,2,0,1.0\n1.5,2,0,1.0\n"
    )
    with pytest.raises(TraceError) as ei:
        read_trace(tmp_path)
    e = ei.value
    assert (e.row, e.column, e.file_row) == (4, "event_time", 1)
    assert e.path is not None and e.path.endswith("part-1.csv")
    assert "row 4, column 'event_time': not an integer (got '1.5')" in str(e)  # the CSV text
    assert "part-1.csv" in str(e)
    got, report = read_trace(tmp_path, on_bad_rows="skip-and-report")
    assert len(got) == 4 and report.total == 1
    assert report.examples["event_time.not_integer"] == [(4, "event_time", "1.5")]


def test_directory_mixed_key_types_become_strings(tmp_path: Path) -> None:
    write_trace(_trace(2), tmp_path / "a.parquet")
    write_trace(_trace(2, string_keys=True), tmp_path / "b.parquet")
    got, _ = read_trace(tmp_path)
    assert got.key.tolist() == ["0", "1", "user-0", "user-1"]


def test_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no trace files"):
        read_trace(tmp_path)


def test_atomic_write_leaves_no_temp_file(tmp_path: Path) -> None:
    write_trace(_trace(4), tmp_path / "t.parquet")
    write_trace(_trace(5), tmp_path / "t.parquet")  # replace an existing file
    assert sorted(os.listdir(tmp_path)) == ["t.parquet"]
    assert len(read_trace(tmp_path / "t.parquet")[0]) == 5


def test_atomic_write_does_not_clobber_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "t.parquet"
    write_trace(_trace(4), target)
    before = target.read_bytes()

    def broken(table: pa.Table, where: str) -> None:
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(io_mod.pq, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        write_trace(_trace(9), target)
    assert target.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["t.parquet"]


def test_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.json"):
        write_trace(_trace(2), tmp_path / "t.json")
    with pytest.raises(ValueError, match=r"\.json"):
        read_trace(tmp_path / "t.json")


def test_key_and_value_optional_on_read(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("event_time,arrival_time\n1,2\n3,4\n")
    t, _ = read_trace(p)
    assert t.key.tolist() == [0, 0] and t.value.tolist() == [1.0, 1.0]
    assert t.partition is None and t.publish_time is None


# --------------------------------------------------------------------------- rules


def _cols(**over: object) -> dict[str, object]:
    cols: dict[str, object] = {
        "event_time": np.array([0, 1, 2, 3, 4], dtype=np.int64),
        "arrival_time": np.array([5, 6, 7, 8, 9], dtype=np.int64),
        "key": np.array([1, 2, 3, 4, 5], dtype=np.int64),
        "value": np.array([1.0, 2.0, 3.0, 4.0, 5.0]),
    }
    cols.update(over)
    return cols


def _fail(cols: dict[str, object], **kw: object) -> TraceError:
    with pytest.raises(TraceError) as ei:
        validate_columns(cols, **kw)  # type: ignore[arg-type]
    return ei.value


def test_rules_are_data() -> None:
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    kinds = {r.kind for r in RULES}
    assert {"missing_column", "null", "not_integer", "out_of_range", "not_causal"} <= kinds
    assert {"not_finite", "unparseable"} <= kinds
    causal = [r for r in RULES if r.kind == "not_causal"]
    assert causal[0].only_if == "require_causal"


@pytest.mark.parametrize("missing", ["event_time", "arrival_time"])
def test_missing_column(missing: str) -> None:
    cols = _cols()
    del cols[missing]
    for policy in ("fail", "skip-and-report"):
        e = _fail(cols, on_bad_rows=policy)
        assert e.row is None and e.column == missing
        assert f"column {missing!r}" in str(e) and "missing" in str(e)


def test_missing_column_in_file(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("event_time,key\n1,2\n")
    with pytest.raises(TraceError) as ei:
        read_trace(p)
    assert ei.value.column == "arrival_time" and ei.value.row is None


def test_nan_timestamp() -> None:
    e = _fail(_cols(event_time=np.array([0.0, 1.0, np.nan, 3.0, 4.0])))
    assert (e.row, e.column) == (2, "event_time")
    assert str(e).startswith("row 2, column 'event_time': null or NaN")


def test_null_in_arrow_column() -> None:
    e = _fail(_cols(arrival_time=pa.array([5, 6, 7, None, 9], type=pa.int64())))
    assert (e.row, e.column) == (3, "arrival_time")


def test_non_integer_float() -> None:
    e = _fail(_cols(arrival_time=np.array([5.0, 6.0, 7.0, 8.0, 9.5])))
    assert (e.row, e.column) == (4, "arrival_time")
    assert str(e) == "row 4, column 'arrival_time': not an integer (got 9.5)"


def test_integral_floats_accepted() -> None:
    t, r = validate_columns(_cols(event_time=np.array([0.0, 1.0, 2.0, 3.0, 4.0])))
    assert t.event_time.dtype == np.int64 and t.event_time.tolist() == [0, 1, 2, 3, 4]
    assert r.ok


@pytest.mark.parametrize("bad", [MAX_TIMESTAMP + 1, MIN_TIMESTAMP - 1])
def test_out_of_range(bad: int) -> None:
    e = _fail(_cols(event_time=np.array([0, bad, 2, 3, 4], dtype=np.int64)))
    assert (e.row, e.column) == (1, "event_time")
    assert "MAX_TIMESTAMP" in str(e)


def test_float_out_of_range_and_inf() -> None:
    e = _fail(_cols(event_time=np.array([0.0, 1.0, 2.0, np.inf, 4.0])))
    assert (e.row, e.column) == (3, "event_time")
    e = _fail(_cols(event_time=np.array([0.0, 1e30, 2.0, 3.0, 4.0])))
    assert (e.row, e.column) == (1, "event_time")


def test_arrival_before_event_only_when_causal() -> None:
    cols = _cols(arrival_time=np.array([5, 6, 1, 8, 9], dtype=np.int64))
    t, r = validate_columns(cols)
    assert len(t) == 5 and r.ok
    e = _fail(cols, require_causal=True)
    assert (e.row, e.column) == (2, "arrival_time")
    assert "arrival_time=1 < event_time=2" in str(e)


def test_value_not_finite() -> None:
    e = _fail(_cols(value=np.array([1.0, np.inf, 3.0, 4.0, 5.0])))
    assert (e.row, e.column) == (1, "value")
    e = _fail(_cols(value=np.array([1.0, 2.0, 3.0, np.nan, 5.0])))
    assert (e.row, e.column) == (3, "value")


def test_unparseable_csv_string(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("event_time,arrival_time,key,value\n1,2,a,1\n2,3,b,1\n3,4,c,1\nabc,5,d,1\n")
    with pytest.raises(TraceError) as ei:
        read_trace(p)
    assert (ei.value.row, ei.value.column) == (3, "event_time")
    assert "got 'abc'" in str(ei.value)
    p.write_text("event_time,arrival_time,value\n1,2,1\n2,3,x\n")
    with pytest.raises(TraceError) as ei:
        read_trace(p)
    assert (ei.value.row, ei.value.column) == (1, "value")


def test_csv_strings_parse_integers_and_iso_times(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text(
        "event_time,arrival_time\n"
        " 7 ,1970-01-01T00:00:01Z\n"
        "2.0,1970-01-01 00:00:02.5\n"
        "1970-01-01T00:00:00.000003,9\n"
    )
    t, _ = read_trace(p)
    assert t.event_time.tolist() == [7, 2, 3]
    assert t.arrival_time.tolist() == [1_000_000, 2_500_000, 9]


@pytest.mark.parametrize(("unit", "scale"), [("s", 1_000_000), ("ms", 1_000), ("us", 1), ("ns", 1)])
def test_arrow_timestamp_units(unit: str, scale: int) -> None:
    raw = [0, 3, 1_700_000_000]
    arr = pa.array(raw, type=pa.timestamp(unit, tz="UTC"))
    t, _ = validate_columns({"event_time": arr, "arrival_time": arr})
    expected = [v * scale if unit != "ns" else v // 1000 for v in raw]
    assert t.event_time.tolist() == expected


def test_arrow_date_and_numpy_datetime() -> None:
    days = pa.array([dt.date(1970, 1, 2)], type=pa.date32())
    ts = np.array(["1970-01-01T00:00:01"], dtype="datetime64[ms]")
    t, _ = validate_columns({"event_time": days, "arrival_time": ts})
    assert t.event_time.tolist() == [86_400_000_000]
    assert t.arrival_time.tolist() == [1_000_000]


def test_parquet_timestamp_column(tmp_path: Path) -> None:
    tab = pa.table(
        {
            "event_time": pa.array([1, 2], type=pa.timestamp("ms")),
            "arrival_time": pa.array([3, 4], type=pa.int32()),
            "key": pa.array(["a", "b"]).dictionary_encode(),
        }
    )
    pq.write_table(tab, tmp_path / "t.parquet")
    t, _ = read_trace(tmp_path / "t.parquet")
    assert t.event_time.tolist() == [1000, 2000]
    assert t.key.tolist() == ["a", "b"]


def test_key_rules() -> None:
    e = _fail(_cols(key=np.array([1, None, 3, 4, 5], dtype=object)))
    assert (e.row, e.column) == (1, "key")
    e = _fail(_cols(key=np.array([1.0, 2.0, 3.5, 4.0, 5.0])))
    assert (e.row, e.column) == (2, "key")
    t, _ = validate_columns(_cols(key=np.array(["a", "b", "c", "d", "e"])))
    assert t.key.dtype == object and t.key.tolist() == ["a", "b", "c", "d", "e"]


def test_first_bad_row_wins_across_rules() -> None:
    cols = _cols(
        event_time=np.array([0.0, 1.0, 2.0, 3.0, 4.5]),
        value=np.array([1.0, 2.0, np.inf, 4.0, 5.0]),
        arrival_time=np.array([5, 6, 7, 2, 9], dtype=np.int64),
    )
    e = _fail(cols, require_causal=True)
    assert (e.row, e.column) == (2, "value")
    # Within one row, RULES order decides: event_time rules come before value rules.
    e = _fail({"event_time": np.array([0.0, 1.5]), "arrival_time": [1, 2], "value": [1.0, np.nan]})
    assert (e.row, e.column) == (1, "event_time")


def test_skip_and_report_counts_and_keeps_order() -> None:
    cols = _cols(
        event_time=np.array([0.0, np.nan, 2.0, 3.5, 4.0]),
        value=np.array([1.0, 2.0, 3.0, 4.0, np.inf]),
    )
    t, r = validate_columns(cols, on_bad_rows="skip-and-report")
    assert t.event_time.tolist() == [0, 2]
    assert t.key.tolist() == [1, 3]
    assert r.rows_read == 5 and r.total == 3 and r.rows_kept == 2
    assert r.counts == {
        "event_time.null": 1,
        "event_time.not_integer": 1,
        "value.not_finite": 1,
    }
    assert r.examples["event_time.not_integer"] == [(3, "event_time", 3.5)]
    assert r.examples["value.not_finite"] == [(4, "value", float("inf"))]
    s = r.summary()
    assert "3 bad rows removed" in s and "value.not_finite" in s


def test_report_examples_capped_and_violations_counted_per_rule() -> None:
    n = 20
    cols = {
        "event_time": np.full(n, 0.5),
        "arrival_time": np.arange(n, dtype=np.int64),
        "value": np.full(n, np.nan),
    }
    t, r = validate_columns(cols, on_bad_rows="skip-and-report")
    assert len(t) == 0
    assert r.counts == {"event_time.not_integer": n, "value.not_finite": n}
    assert r.total == n  # distinct rows
    assert len(r.examples["event_time.not_integer"]) == 5


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="on_bad_rows"):
        validate_columns(_cols(), on_bad_rows="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_bad_rows"):
        read_trace("x.csv", on_bad_rows="drop")  # type: ignore[arg-type]


def test_length_mismatch() -> None:
    e = _fail(_cols(value=np.ones(3)))
    assert e.column == "value" and e.row is None


def test_trace_error_pickles() -> None:
    e = TraceError("not an integer (got 1.5)", row=17, column="event_time")
    assert str(e) == "row 17, column 'event_time': not an integer (got 1.5)"
    back = pickle.loads(pickle.dumps(e))
    assert (back.row, back.column, str(back)) == (17, "event_time", str(e))
    assert isinstance(back, ValueError)


def test_from_arrow() -> None:
    tab = _trace(4).to_arrow()
    t, r = Trace.from_arrow(tab)
    assert t == _trace(4) and isinstance(r, BadRowReport)


@settings(max_examples=40, deadline=None)
@given(
    kinds=st.lists(
        st.sampled_from(["ok", "nan", "frac", "range", "inf_value", "causal"]), max_size=30
    )
)
def test_skip_and_report_property(kinds: list[str]) -> None:
    n = len(kinds)
    et = np.arange(n, dtype=np.float64) * 10
    at = et + 5
    val = np.arange(n, dtype=np.float64)
    for i, k in enumerate(kinds):
        if k == "nan":
            et[i] = np.nan
        elif k == "frac":
            at[i] += 0.25
        elif k == "range":
            et[i] = 1e19
        elif k == "inf_value":
            val[i] = -np.inf
        elif k == "causal":
            at[i] = et[i] - 1
    cols = {"event_time": et, "arrival_time": at, "value": val}
    t, r = validate_columns(cols, on_bad_rows="skip-and-report", require_causal=True)
    good = [i for i, k in enumerate(kinds) if k == "ok"]
    assert t.value.tolist() == [float(i) for i in good]
    assert r.rows_read == n and r.rows_kept == len(good)
    assert r.total == n - len(good)
    assert sum(r.counts.values()) == n - len(good)  # one violation per bad row here
    if good != list(range(n)):
        first_bad = next(i for i, k in enumerate(kinds) if k != "ok")
        with pytest.raises(TraceError) as ei:
            validate_columns(cols, require_causal=True)
        assert ei.value.row == first_bad
